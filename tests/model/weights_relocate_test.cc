// copy_weights_to_arena: every matrix with data (and its FP8/int8 block scales) copied
// byte for byte into the arena and repointed; a matrix bound twice (tied embeddings)
// copied once; an FP8 row view's scales from its block row; experts not loaded left
// alone; the bytes copied counted exactly.
#include "moe/model/weights_relocate.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

namespace moe {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

bool inside(const void* p, const std::vector<uint8_t>& v) {
  const auto* b = static_cast<const uint8_t*>(p);
  return b >= v.data() && b < v.data() + v.size();
}

TEST(WeightsRelocateTest, CopiesEveryMatrixOnceAndRepointsIt) {
  // bf16 embedding [16, 8], tied lm_head; one layer: q_proj bf16 [8, 8], an int8 expert
  // matrix [4, 32] with f32 scales per 32, an FP8 row view (rows 2..5 of [6, 4], blocks
  // of 2 x 4: row_phase 0 at block row 1), an unloaded expert.
  auto embed = pattern(16 * 8 * 2, 1), q = pattern(8 * 8 * 2, 2), i8 = pattern(4 * 32, 3), i8s = pattern(4 * 4, 4);
  auto f8 = pattern(6 * 4, 5), unloaded = pattern(64, 7);
  std::vector<uint8_t> f8s(3 * sizeof(float));  // the full matrix's 3 block rows: 1.5, 2.5, 3.5
  const float scales[3] = {1.5f, 2.5f, 3.5f};
  std::memcpy(f8s.data(), scales, sizeof scales);
  ModelWeights w;
  w.embed_tokens = {embed.data(), DType::kBF16, 16, 8};
  w.lm_head = w.embed_tokens;
  w.layers.resize(1);
  LayerWeights& l = w.layers[0];
  l.q_proj = {q.data(), DType::kBF16, 8, 8};
  l.experts.resize(2);
  l.experts[0].loaded = true;
  l.experts[0].w1 = {i8.data(), DType::kI8, 4, 32, i8s.data(), DType::kF32, 1, 32};
  Weight2D fp8_full{f8.data(), DType::kF8E4M3, 6, 4, f8s.data(), DType::kF32, 2, 4};
  l.experts[0].w2 = row_block(fp8_full, 2, 4);
  l.experts[1].loaded = false;
  l.experts[1].w1 = {unloaded.data(), DType::kBF16, 4, 8};
  const ModelWeights before = w;

  const size_t counted = weights_bytes_to_copy(w);
  EXPECT_EQ(w.layers[0].q_proj.data, q.data());  // counting changes nothing
  HugePageArena arena;
  const size_t bytes = copy_weights_to_arena(&w, &arena);
  EXPECT_EQ(counted, bytes);
  // embed once (lm_head shares it) + q + int8 codes and scales + FP8 rows 2..5 and their
  // two block rows of scales.
  EXPECT_EQ(bytes, embed.size() + q.size() + i8.size() + i8s.size() + 4 * 4 + 2 * 4);
  EXPECT_EQ(arena.allocated_bytes(), bytes);
  EXPECT_EQ(w.lm_head.data, w.embed_tokens.data);
  for (const auto& [now, was, src] :
       {std::tuple{w.embed_tokens, before.embed_tokens, &embed}, std::tuple{l.q_proj, before.layers[0].q_proj, &q},
        std::tuple{l.experts[0].w1, before.layers[0].experts[0].w1, &i8},
        std::tuple{l.experts[0].w2, before.layers[0].experts[0].w2, &f8}}) {
    EXPECT_FALSE(inside(now.data, *src));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(now.data) % 64, 0u);
    EXPECT_EQ(now.rows, was.rows);
    EXPECT_EQ(now.cols, was.cols);
    EXPECT_EQ(now.dtype, was.dtype);
    EXPECT_EQ(now.row_phase, was.row_phase);
    EXPECT_EQ(0, std::memcmp(now.data, was.data, was.data_bytes()));
    EXPECT_EQ(now.scale_bytes(), was.scale_bytes());
    if (was.has_scale()) {
      EXPECT_EQ(0, std::memcmp(now.scale, was.scale, was.scale_bytes()));
    }
  }
  // The FP8 view's scales are those of block rows 1 and 2 of the full matrix.
  EXPECT_EQ(l.experts[0].w2.block_scale(0, 0), 2.5f);
  EXPECT_EQ(l.experts[0].w2.block_scale(1, 0), 3.5f);
  EXPECT_EQ(l.experts[1].w1.data, unloaded.data());  // not loaded: untouched
  EXPECT_EQ(l.k_proj.data, nullptr);                 // empty stays empty
}

// On several threads, in jobs of 4 MiB: the copies are byte-identical; with check_finite
// the first NaN or Inf (in matrix order, then element order) is reported by the matrix's
// original first byte and its element index, in a matrix larger than one job, in block
// scales, and not in a matrix the copy leaves alone.
TEST(WeightsRelocateTest, ParallelCopyChecksWhatItCopies) {
  const size_t rows = 2048, cols = 1536;  // bf16: 6 MiB, two jobs
  std::vector<uint8_t> big(rows * cols * 2, 0), q(8 * 8 * 2, 0), i8(4 * 32, 0xFF), i8s(4 * 4, 0), unloaded(64, 0xFF);
  for (size_t i = 0; i < big.size(); i += 2) big[i] = static_cast<uint8_t>(i * 7);  // finite bf16: low byte only
  ModelWeights w;
  w.embed_tokens = {big.data(), DType::kBF16, static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
  w.lm_head = w.embed_tokens;
  w.layers.resize(1);
  LayerWeights& l = w.layers[0];
  l.q_proj = {q.data(), DType::kBF16, 8, 8};
  l.experts.resize(2);
  l.experts[0].loaded = true;
  l.experts[0].w1 = {i8.data(), DType::kI8, 4, 32, i8s.data(), DType::kF32, 1, 32};  // int8 codes 0xFF: no exponent
  l.experts[1].loaded = false;
  l.experts[1].w1 = {unloaded.data(), DType::kBF16, 4, 8};  // all NaN, never copied

  auto copy = [&](bool check) {
    ModelWeights c = w;
    HugePageArena arena;
    ArenaCopyResult r = copy_weights_to_arena(&c, &arena, ArenaCopyOptions{.threads = 3, .check_finite = check});
    EXPECT_EQ(r.bytes, big.size() + q.size() + i8.size() + i8s.size());
    EXPECT_EQ(0, std::memcmp(c.embed_tokens.data, big.data(), big.size()));
    EXPECT_EQ(0, std::memcmp(c.layers[0].q_proj.data, q.data(), q.size()));
    EXPECT_EQ(0, std::memcmp(c.layers[0].experts[0].w1.scale, i8s.data(), i8s.size()));
    return r.non_finite;
  };
  EXPECT_FALSE(copy(true).has_value());
  const std::vector<const void*> sources = weights_copy_sources(w);
  EXPECT_EQ(sources, (std::vector<const void*>{big.data(), q.data(), i8.data(), i8s.data()}));

  // An Inf in the second job of the embedding (element 2.5M), a NaN in q_proj: the embedding's comes first.
  const size_t at = 2500000;
  big[at * 2] = 0x80;
  big[at * 2 + 1] = 0x7F;  // 0x7F80: +Inf
  q[10] = 0xC0;
  q[11] = 0x7F;  // element 5: 0x7FC0, NaN
  auto bad = copy(true);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->data, big.data());
  EXPECT_EQ(bad->dtype, DType::kBF16);
  EXPECT_EQ(bad->index, static_cast<int64_t>(at));
  EXPECT_FALSE(copy(false).has_value());  // not checked: copied as is

  big[at * 2 + 1] = 0;
  bad = copy(true);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->data, q.data());
  EXPECT_EQ(bad->index, 5);

  q[11] = 0;
  const float nan_scale = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(i8s.data() + 8, &nan_scale, 4);  // scale 2 of the int8 matrix
  bad = copy(true);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->data, i8s.data());
  EXPECT_EQ(bad->dtype, DType::kF32);
  EXPECT_EQ(bad->index, 2);
}

}  // namespace
}  // namespace moe
