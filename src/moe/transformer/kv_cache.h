// Key/value cache for one sequence: per layer, K and V as [num_kv_heads, capacity,
// head_dim] (heads outermost so attention reads each head contiguously), f32 or, with
// --kv-dtype, bf16 / f16: rows are rounded to nearest (even) when written and read
// directly by attention (half the bytes per decode step and per cached token).
// Multi-head latent attention keeps one row per position instead (the latent cache):
// num_kv_heads 1, head_dim kv_lora_rank + qk_rope_head_dim, v_head_dim 0 (no V).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "moe/model/config.h"
#include "moe/ops/attention.h"
#include "moe/tensor/tensor.h"

namespace moe {

// What one layer's cache holds per position: `heads` rows of k_dim (and v_dim) elements
// of `dtype`. GQA: num_key_value_heads x head_dim keys and values. MLA: one latent row
// of kv_lora_rank + qk_rope_head_dim floats, no V (f32 only).
struct KvCacheShape {
  int heads = 0;
  int k_dim = 0;
  int v_dim = 0;
  DType dtype = DType::kF32;  // f32, bf16 or f16
  size_t bytes_per_token_per_layer() const {
    return static_cast<size_t>(heads) * static_cast<size_t>(k_dim + v_dim) * dtype_size(dtype);
  }
};
// `dtype`: the cache's element type (the caller has checked that the model supports it:
// kv_dtype_error).
KvCacheShape kv_cache_shape(const ModelConfig& config, DType dtype = DType::kF32);
// Why `config`'s model cannot keep its KV cache in `dtype`, naming --kv-dtype (empty when
// it can): only f32, bf16 and f16; MLA's latent cache is f32 only.
std::string kv_dtype_error(const ModelConfig& config, DType dtype);
// The --kv-dtype name of a dtype: "f32", "bf16", "f16" (others: dtype_name).
const char* kv_dtype_name(DType dtype);

class KVCache {
 public:
  // v_head_dim: width of the V rows; -1 = head_dim, 0 = no V (MLA's latent cache). f32.
  KVCache(int num_layers, int num_kv_heads, int head_dim, int64_t capacity, int v_head_dim = -1);
  // shape.heads x k_dim / v_dim rows of shape.dtype (v_dim 0 = no V).
  KVCache(int num_layers, const KvCacheShape& shape, int64_t capacity);

  // Layer `layer`'s K / V as f32 (MOE_CHECK: an f32 cache; MLA's latent rows).
  float* k(int layer);
  float* v(int layer);
  DType dtype() const { return dtype_; }
  int64_t capacity() const { return capacity_; }
  // Layer `layer`'s K and V as [num_kv_heads, capacity, head_dim] views of dtype().
  KvView layer(int layer);
  size_t bytes() const { return k_.bytes() + v_.bytes(); }

  // Writes m tokens' keys/values, keys [m, num_kv_heads * head_dim] and values
  // [m, num_kv_heads * v_head_dim] f32 contiguous (values ignored when v_head_dim is 0),
  // at positions [start_pos, start_pos + m) of `layer`, rounded to dtype(). Requires
  // start_pos + m <= capacity (MOE_CHECK).
  void write(int layer, int64_t start_pos, const TensorView& keys, const TensorView& values);

 private:
  int num_kv_heads_, head_dim_, v_head_dim_;
  int64_t capacity_;
  DType dtype_;
  size_t layer_stride_, v_layer_stride_;  // elements
  Tensor k_, v_;  // [num_layers * layer_stride] of dtype_, zeroed
};

}  // namespace moe
