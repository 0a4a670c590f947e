// Causal grouped-query attention (Ainslie et al. 2023, GQA) over a KV cache.
//
//   q:       [m, num_heads * head_dim] f32, already rotated; query t sits at position
//            start_pos + t and attends to positions [0, start_pos + t].
//   k_cache, v_cache: [num_kv_heads, capacity, head_dim] f32, positions
//            [0, start_pos + m) already written.
//   out:     [m, num_heads * head_dim] f32.
// Query head h reads KV head h / (num_heads / num_kv_heads). Scores are scaled by
// 1/sqrt(head_dim) and softmaxed in f32. Decode-sized m uses dot loops; larger m uses
// sgemm per head on query blocks. Heads are split over OpenMP threads.
#pragma once

#include <cstdint>

namespace moe {

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t capacity = 0;  // positions per head in the cache
};

void causal_attention(const float* q, int64_t m, int64_t start_pos, const float* k_cache,
                      const float* v_cache, const AttentionShape& shape, float* out);

}  // namespace moe
