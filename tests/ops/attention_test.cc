// causal_attention against a naive double-precision GQA implementation, on both the
// dot-loop (decode) and the sgemm query-block (prefill) paths.
#include "moe/ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace moe {
namespace {

struct Problem {
  AttentionShape shape;
  int64_t m = 0, start_pos = 0;
  std::vector<float> q, k_cache, v_cache;
};

// Random q and cache for positions [0, start_pos + m); cache slots beyond that are NaN
// so that reading them would poison the output.
Problem make_problem(int heads, int kv_heads, int hd, int64_t m, int64_t start_pos, uint32_t seed) {
  Problem p;
  p.shape = AttentionShape{heads, kv_heads, hd, start_pos + m + 5};
  p.m = m;
  p.start_pos = start_pos;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  p.q.resize(static_cast<size_t>(m * heads * hd));
  for (auto& v : p.q) v = dist(rng);
  const size_t cache = static_cast<size_t>(kv_heads * p.shape.capacity * hd);
  p.k_cache.assign(cache, std::numeric_limits<float>::quiet_NaN());
  p.v_cache.assign(cache, std::numeric_limits<float>::quiet_NaN());
  for (int h = 0; h < kv_heads; ++h) {
    for (int64_t pos = 0; pos < start_pos + m; ++pos) {
      for (int i = 0; i < hd; ++i) {
        const size_t j = static_cast<size_t>((h * p.shape.capacity + pos) * hd + i);
        p.k_cache[j] = dist(rng);
        p.v_cache[j] = dist(rng);
      }
    }
  }
  return p;
}

// out[t, h*hd + i] = sum_p softmax_p(q.k_p / sqrt(hd)) v_p[i], p in [0, start_pos + t].
std::vector<double> naive_attention(const Problem& p) {
  const auto& s = p.shape;
  const int hd = s.head_dim;
  const int64_t row = static_cast<int64_t>(s.num_heads) * hd;
  std::vector<double> out(static_cast<size_t>(p.m * row), 0.0);
  const int group = s.num_heads / s.num_kv_heads;
  for (int64_t t = 0; t < p.m; ++t) {
    const int64_t ctx = p.start_pos + t + 1;
    for (int h = 0; h < s.num_heads; ++h) {
      const int kvh = h / group;
      const float* q = p.q.data() + t * row + h * hd;
      std::vector<double> sc(static_cast<size_t>(ctx));
      double mx = -1e300;
      for (int64_t pos = 0; pos < ctx; ++pos) {
        const float* k = p.k_cache.data() + (kvh * s.capacity + pos) * hd;
        double d = 0;
        for (int i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * k[i];
        sc[static_cast<size_t>(pos)] = d / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, sc[static_cast<size_t>(pos)]);
      }
      double sum = 0;
      for (auto& v : sc) sum += (v = std::exp(v - mx));
      for (int64_t pos = 0; pos < ctx; ++pos) {
        const float* v = p.v_cache.data() + (kvh * s.capacity + pos) * hd;
        const double w = sc[static_cast<size_t>(pos)] / sum;
        for (int i = 0; i < hd; ++i) out[static_cast<size_t>(t * row + h * hd + i)] += w * v[i];
      }
    }
  }
  return out;
}

// Runs the tensor entry on a Problem-shaped call.
void run_attention(const Problem& p, int64_t m, int64_t start_pos, float* out, const KernelOptions& options = {}) {
  const AttentionShape& s = p.shape;
  const KvView cache{TensorView::f32(p.k_cache.data(), {s.num_kv_heads, s.capacity, s.head_dim}),
                     TensorView::f32(p.v_cache.data(), {s.num_kv_heads, s.capacity, s.head_dim})};
  causal_attention(TensorView::f32(p.q.data(), {m, s.num_heads, s.head_dim}), start_pos, cache,
                   TensorView::f32(out, {m, s.num_heads, s.head_dim}), options);
}

void check_against_naive(int heads, int kv_heads, int hd, int64_t m, int64_t start_pos) {
  SCOPED_TRACE("heads=" + std::to_string(heads) + " kv=" + std::to_string(kv_heads) + " hd=" + std::to_string(hd) +
               " m=" + std::to_string(m) + " start_pos=" + std::to_string(start_pos));
  const Problem p = make_problem(heads, kv_heads, hd, m, start_pos, static_cast<uint32_t>(m * 100 + start_pos));
  const std::vector<double> want = naive_attention(p);
  std::vector<float> out(want.size() + 4, -777.0f);
  run_attention(p, m, start_pos, out.data());
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(out[i] - want[i]) <= 2e-5)) {
      if (++bad <= 5) ADD_FAILURE() << "element " << i << " got " << out[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0);
  for (size_t i = want.size(); i < out.size(); ++i) EXPECT_EQ(out[i], -777.0f) << "wrote past output at " << i;
}

TEST(AttentionTest, DecodeOneTokenGqa) { check_against_naive(4, 2, 8, 1, 5); }
TEST(AttentionTest, DecodeTwoTokens) { check_against_naive(4, 2, 8, 2, 9); }
TEST(AttentionTest, PrefillSmallGqa) { check_against_naive(4, 2, 8, 7, 0); }
TEST(AttentionTest, PrefillThreeTokensAfterContext) { check_against_naive(4, 2, 8, 3, 11); }
// 300 queries: sgemm blocks of 128, 128 and 44, multi-threaded over heads.
TEST(AttentionTest, PrefillManyBlocksGqa) { check_against_naive(4, 2, 8, 300, 3); }
// 129 queries: the last block holds one query and takes the dot-loop path.
TEST(AttentionTest, PrefillBlockWithSingleTail) { check_against_naive(4, 2, 8, 129, 0); }
TEST(AttentionTest, MultiHeadNoSharing) { check_against_naive(3, 3, 16, 6, 2); }
TEST(AttentionTest, MultiQueryOneKvHead) { check_against_naive(4, 1, 8, 5, 1); }

// With one visible position the softmax weight is exactly 1, so out == v bit for bit.
TEST(AttentionTest, SinglePositionReturnsV) {
  const Problem p = make_problem(4, 2, 8, 1, 0, 17);
  std::vector<float> out(static_cast<size_t>(4 * 8));
  run_attention(p, 1, 0, out.data());
  for (int h = 0; h < 4; ++h) {
    const int kvh = h / 2;
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(out[static_cast<size_t>(h * 8 + i)], p.v_cache[static_cast<size_t>(kvh * p.shape.capacity * 8 + i)])
          << "h=" << h << " i=" << i;
    }
  }
}

// In a prefill from position 0 (sgemm path), query 0 sees only position 0: out == v_0.
TEST(AttentionTest, FirstPrefillQueryReturnsV) {
  const Problem p = make_problem(4, 2, 8, 7, 0, 23);
  std::vector<float> out(static_cast<size_t>(7 * 4 * 8));
  run_attention(p, 7, 0, out.data());
  for (int h = 0; h < 4; ++h) {
    for (int i = 0; i < 8; ++i) {
      EXPECT_FLOAT_EQ(out[static_cast<size_t>(h * 8 + i)],
                      p.v_cache[static_cast<size_t>((h / 2) * p.shape.capacity * 8 + i)])
          << "h=" << h << " i=" << i;
    }
  }
}

// Hand case: head_dim 2, two positions, q = [ln(4) * sqrt(2), 0], k0 = [0, 0],
// k1 = [1, 0] -> scores [0, ln 4] -> weights [1/5, 4/5].
TEST(AttentionTest, HandWeights) {
  const AttentionShape s{1, 1, 2, 2};
  const float q[2] = {static_cast<float>(std::log(4.0) * std::sqrt(2.0)), 0};
  const float k[4] = {0, 0, 1, 0};
  const float v[4] = {10, -5, 0, 5};
  float out[2];
  causal_attention(TensorView::f32(q, {1, 1, 2}), 1, KvView{TensorView::f32(k, {1, s.capacity, 2}), TensorView::f32(v, {1, s.capacity, 2})},
                   TensorView::f32(out, {1, 1, 2}), KernelOptions{});
  EXPECT_NEAR(out[0], 10 * 0.2 + 0 * 0.8, 1e-5);  // 2
  EXPECT_NEAR(out[1], -5 * 0.2 + 5 * 0.8, 1e-5);  // 3
}


// Batch-invariant mode takes one query at a time: each query's output is bitwise that of
// a decode step over the same cache, whatever m is.
TEST(AttentionTest, BatchInvariantPrefillEqualsDecodeSteps) {
  const int64_t m = 9;
  const Problem p = make_problem(4, 2, 8, m, 0, 29);
  std::vector<float> all(static_cast<size_t>(m * 4 * 8));
  run_attention(p, m, 0, all.data(), KernelOptions{.batch_invariant = true});
  for (int64_t t = 0; t < m; ++t) {
    Problem one = p;
    one.q.assign(p.q.begin() + t * 32, p.q.begin() + (t + 1) * 32);
    std::vector<float> out(32);
    run_attention(one, 1, t, out.data(), KernelOptions{.batch_invariant = true});
    for (size_t i = 0; i < 32; ++i) ASSERT_EQ(all[static_cast<size_t>(t * 32) + i], out[i]) << "t=" << t << " i=" << i;
  }
}

TEST(AttentionDeathTest, PositionsBeyondTheCacheAreAProgrammingError) {
  const Problem p = make_problem(4, 2, 8, 2, 0, 31);
  std::vector<float> out(64);
  EXPECT_DEATH(run_attention(p, 2, p.shape.capacity - 1, out.data()), "");
}

}  // namespace
}  // namespace moe
