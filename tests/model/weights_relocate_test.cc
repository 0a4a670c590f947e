// copy_weights_to_arena: every matrix with data (and its FP8/int8 block scales) copied
// byte for byte into the arena and repointed; a matrix bound twice (tied embeddings)
// copied once; an FP8 row view's scales from its block row; experts not loaded left
// alone; the bytes copied counted exactly.
#include "moe/model/weights_relocate.h"

#include <gtest/gtest.h>

#include <cstring>
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

}  // namespace
}  // namespace moe
