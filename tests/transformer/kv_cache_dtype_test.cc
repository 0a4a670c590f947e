// The 16-bit KV caches (--kv-dtype bf16 / f16): the bits written (hand-computed
// roundings), attention over them against a double-precision softmax(q K^T / sqrt(d)) V
// of the stored (rounded) keys and values, decode and prefill (sgemm) paths, head_dim
// with and without the AVX2 loop, the paged cache bitwise equal to the contiguous one,
// and the results identical at 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "moe/ops/attention.h"
#include "moe/ops/paged_attention.h"
#include "moe/transformer/kv_cache.h"
#include "moe/transformer/paged_kv_cache.h"

namespace moe {
namespace {

uint16_t bits_at(const TensorView& v, int64_t i) {
  uint16_t b;
  std::memcpy(&b, static_cast<const uint8_t*>(v.data()) + 2 * i, 2);
  return b;
}

// Hand-computed roundings (round to nearest, ties to even).
TEST(KvCacheDtypeTest, WriteRoundsToNearestEven) {
  struct Case {
    float x;
    uint16_t bf16, f16;
  };
  const Case cases[] = {
      {1.0f, 0x3F80, 0x3C00},
      {-2.0f, 0xC000, 0xC000},
      {1.0f + 1.0f / 256, 0x3F80, 0x3C04},           // bf16: a tie, to even (down); f16: exact
      {1.0f + 3.0f / 256, 0x3F82, 0x3C0C},           // bf16: a tie, to even (up)
      {1.0f + 1.0f / 2048, 0x3F80, 0x3C00},          // f16: a tie (half an ulp of 2^-10), to even
      {0.1f, 0x3DCD, 0x2E66},                        // 0x3DCCCCCD: bf16 rounds up; f16 0.0999755859375
      {65504.0f, 0x4780, 0x7BFF},                    // the largest f16; bf16 0x477FE000 rounds up
  };
  for (DType dt : {DType::kBF16, DType::kF16}) {
    KVCache cache(1, KvCacheShape{1, 8, 8, dt}, 1);
    EXPECT_EQ(cache.bytes(), 2u * 8 * 2);
    std::vector<float> k(8, 0.0f), v(8, 0.0f);
    for (size_t i = 0; i < std::size(cases); ++i) {
      k[i] = cases[i].x;
      v[i] = -cases[i].x;
    }
    cache.write(0, 0, TensorView::f32(k.data(), {1, 8}), TensorView::f32(v.data(), {1, 8}));
    const KvView view = cache.layer(0);
    ASSERT_EQ(view.k.dtype(), dt);
    for (size_t i = 0; i < std::size(cases); ++i) {
      const uint16_t want = dt == DType::kBF16 ? cases[i].bf16 : cases[i].f16;
      EXPECT_EQ(bits_at(view.k, static_cast<int64_t>(i)), want) << dtype_name(dt) << " " << cases[i].x;
      EXPECT_EQ(bits_at(view.v, static_cast<int64_t>(i)), want ^ 0x8000) << dtype_name(dt) << " " << -cases[i].x;
    }
  }
}

struct Shape {
  int heads, kv_heads, hd;
};

float stored(const TensorView& t, int64_t i) {
  if (t.dtype() == DType::kF32) return t.data_as<const float>()[i];
  const uint16_t b = bits_at(t, i);
  return t.dtype() == DType::kBF16 ? bf16_to_f32(b) : f16_to_f32(b);
}

// Fills positions [0, ctx) of a contiguous cache (one layer) with random rows; q: [m, heads * hd].
void fill(KVCache* cache, const Shape& s, int64_t ctx, std::mt19937* rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(ctx * s.kv_heads * s.hd)), v(k.size());
  for (auto& x : k) x = d(*rng);
  for (auto& x : v) x = d(*rng);
  cache->write(0, 0, TensorView::f32(k.data(), {ctx, s.kv_heads * s.hd}),
               TensorView::f32(v.data(), {ctx, s.kv_heads * s.hd}));
}

// out[t, h, :] in double over the cache's stored values; query t at position start + t.
std::vector<double> naive(const std::vector<float>& q, int64_t m, int64_t start, KVCache& cache, const Shape& s) {
  const KvView view = cache.layer(0);
  const int64_t cap = cache.capacity();
  std::vector<double> out(static_cast<size_t>(m * s.heads * s.hd), 0.0);
  for (int64_t t = 0; t < m; ++t) {
    for (int h = 0; h < s.heads; ++h) {
      const int kvh = h / (s.heads / s.kv_heads);
      const int64_t ctx = start + t + 1;
      std::vector<double> sc(static_cast<size_t>(ctx));
      double mx = -1e300;
      for (int64_t p = 0; p < ctx; ++p) {
        double dot = 0;
        for (int i = 0; i < s.hd; ++i) {
          dot += static_cast<double>(q[static_cast<size_t>((t * s.heads + h) * s.hd + i)]) *
                 stored(view.k, (kvh * cap + p) * s.hd + i);
        }
        sc[static_cast<size_t>(p)] = dot / std::sqrt(static_cast<double>(s.hd));
        mx = std::max(mx, sc[static_cast<size_t>(p)]);
      }
      double sum = 0;
      for (auto& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t p = 0; p < ctx; ++p) {
        for (int i = 0; i < s.hd; ++i) {
          out[static_cast<size_t>((t * s.heads + h) * s.hd + i)] +=
              sc[static_cast<size_t>(p)] / sum * stored(view.v, (kvh * cap + p) * s.hd + i);
        }
      }
    }
  }
  return out;
}

void check_attention(DType dt, const Shape& s, int64_t m, int64_t start) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " hd " + std::to_string(s.hd) + " m " + std::to_string(m) + " start " +
               std::to_string(start));
  std::mt19937 rng(static_cast<uint32_t>(7 * m + start + s.hd));
  const int64_t cap = start + m + 3;
  KVCache cache(1, KvCacheShape{s.kv_heads, s.hd, s.hd, dt}, cap);
  fill(&cache, s, start + m, &rng);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(m * s.heads * s.hd));
  for (auto& x : q) x = d(rng);
  const std::vector<double> ref = naive(q, m, start, cache, s);
  std::vector<float> out(q.size()), out2(q.size());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  causal_attention(TensorView::f32(q.data(), {m, s.heads, s.hd}), start, cache.layer(0),
                   TensorView::f32(out.data(), {m, s.heads, s.hd}), {});
  omp_set_num_threads(2);
  causal_attention(TensorView::f32(q.data(), {m, s.heads, s.hd}), start, cache.layer(0),
                   TensorView::f32(out2.data(), {m, s.heads, s.hd}), {});
  omp_set_num_threads(saved);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], ref[i], 2e-5 * (1 + std::fabs(ref[i]))) << i;
    ASSERT_EQ(out[i], out2[i]) << "thread count changed element " << i;
  }
}

TEST(KvCacheDtypeTest, DecodeAttentionReadsSixteenBitRows) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    check_attention(dt, {4, 2, 8}, 1, 37);  // AVX2 loop
    check_attention(dt, {4, 2, 6}, 1, 37);  // scalar loop (hd % 8 != 0)
    check_attention(dt, {4, 1, 16}, 2, 5);
  }
}

TEST(KvCacheDtypeTest, PrefillSgemmPathWidensTheCache) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    check_attention(dt, {4, 2, 8}, 40, 0);  // query blocks through sgemm (m > 2)
    check_attention(dt, {2, 2, 8}, 130, 9);  // two query blocks
  }
}

TEST(KvCacheDtypeTest, PagedEqualsContiguousBitwise) {
  const Shape s{4, 2, 8};
  const int64_t ctx = 21, block = 4;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(ctx * s.kv_heads * s.hd)), v(k.size()), q(static_cast<size_t>(s.heads * s.hd));
    for (auto& x : k) x = d(rng);
    for (auto& x : v) x = d(rng);
    for (auto& x : q) x = d(rng);
    KVCache cache(1, KvCacheShape{s.kv_heads, s.hd, s.hd, dt}, ctx);
    PagedKVCache paged(1, KvCacheShape{s.kv_heads, s.hd, s.hd, dt}, static_cast<int>(block), 8);
    EXPECT_EQ(paged.bytes(), 2u * 8 * block * s.kv_heads * s.hd * 2);
    const std::vector<int32_t> table = {5, 0, 7, 2, 3, 6};  // blocks out of order
    const TensorView kv_k = TensorView::f32(k.data(), {ctx, s.kv_heads * s.hd});
    const TensorView kv_v = TensorView::f32(v.data(), {ctx, s.kv_heads * s.hd});
    cache.write(0, 0, kv_k, kv_v);
    paged.write(0, table.data(), 0, kv_k, kv_v);
    std::vector<float> a(q.size()), b(q.size());
    causal_attention(TensorView::f32(q.data(), {1, s.heads, s.hd}), ctx - 1, cache.layer(0),
                     TensorView::f32(a.data(), {1, s.heads, s.hd}), {});
    const PagedAttentionSeq seq{q.data(), b.data(), 1, ctx - 1, table.data()};
    paged_causal_attention(&seq, 1, paged.layer(0), s.heads);
    EXPECT_EQ(a, b);
  }
}

}  // namespace
}  // namespace moe
