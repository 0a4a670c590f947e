// Causal grouped-query attention (Ainslie et al. 2023, GQA) over a contiguous KV cache.
//
//   q:     [m, num_heads, head_dim] f32, contiguous, already rotated; query t sits at
//          position start_pos + t and attends to positions [0, start_pos + t].
//   cache: k and v [num_kv_heads, capacity, head_dim], both f32, bf16 or f16 (the KV
//          cache's dtype), contiguous, positions [0, start_pos + m) already written
//          (start_pos + m <= capacity). Decode reads 16-bit rows directly (widened in
//          registers); the sgemm path widens one head's rows to f32 scratch first.
//   out:   [m, num_heads, head_dim] f32, contiguous, overwritten.
// Query head h reads KV head h / (num_heads / num_kv_heads). Scores are scaled by
// 1/sqrt(head_dim) and softmaxed in f32. Decode-sized m uses dot loops; larger m uses
// sgemm per head on query blocks (one query at a time with options.batch_invariant).
// Heads are split over OpenMP threads; results do not depend on the thread count.
// Shapes, dtypes and device are checked once (MOE_CHECK), then the device's kernel runs
// (ops/attention_cpu.{h,cc}).
#pragma once

#include <cstdint>

#include "moe/ops/attention_cpu.h"
#include "moe/ops/kernel_options.h"
#include "moe/tensor/tensor.h"

namespace moe {

// One layer's keys and values (not owned).
struct KvView {
  TensorView k;
  TensorView v;
};

void causal_attention(const TensorView& q, int64_t start_pos, const KvView& cache, const TensorView& out,
                      const KernelOptions& options);

}  // namespace moe
