// The CPU kernels behind causal_attention() and paged_causal_attention(), on raw pointers
// (ops/attention.h, ops/paged_attention.h have the contracts).
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/ops/kernel_options.h"
#include "moe/tensor/dtype.h"

namespace moe {

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t capacity = 0;  // positions per head in the cache
};

struct PagedAttentionSeq {
  const float* q;              // [m, num_heads * head_dim], rotated; row t at position start_pos + t
  float* out;                  // [m, num_heads * head_dim]
  int64_t m = 0;
  int64_t start_pos = 0;       // positions [0, start_pos + m) already written to the cache
  const int32_t* block_table;  // blocks covering positions [0, start_pos + m)
};

namespace cpu {

// One call of the contiguous-cache kernel.
struct CausalAttentionArgs {
  const float* q;        // [m, num_heads * head_dim]
  int64_t m;
  int64_t start_pos;
  const void* k_cache;   // [num_kv_heads, capacity, head_dim] of kv_dtype
  const void* v_cache;
  float* out;            // [m, num_heads * head_dim]
  DType kv_dtype = DType::kF32;  // f32, bf16 or f16
};
void causal_attention(const CausalAttentionArgs& args, const AttentionShape& shape, const KernelOptions& options);

// One layer's block pools: block b, KV head h, offset o at
// ((b * num_kv_heads + h) * block_size + o) * head_dim. shape.capacity is unused.
struct PagedPools {
  const void* k_layer;  // elements of dtype
  const void* v_layer;
  int block_size;
  DType dtype = DType::kF32;  // f32, bf16 or f16
};
void paged_causal_attention(const PagedAttentionSeq* seqs, size_t num_seqs, const PagedPools& pools,
                            const AttentionShape& shape);

}  // namespace cpu
}  // namespace moe
