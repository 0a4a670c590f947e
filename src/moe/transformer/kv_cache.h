// Key/value cache for one sequence: per layer, K and V as [num_kv_heads, capacity,
// head_dim] f32 (heads outermost so attention reads each head contiguously).
// Multi-head latent attention keeps one row per position instead (the latent cache):
// num_kv_heads 1, head_dim kv_lora_rank + qk_rope_head_dim, v_head_dim 0 (no V).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moe/model/config.h"
#include "moe/ops/attention.h"
#include "moe/tensor/tensor.h"

namespace moe {

// What one layer's cache holds per position: `heads` rows of k_dim (and v_dim) f32.
// GQA: num_key_value_heads x head_dim keys and values. MLA: one latent row of
// kv_lora_rank + qk_rope_head_dim floats, no V.
struct KvCacheShape {
  int heads = 0;
  int k_dim = 0;
  int v_dim = 0;
  size_t bytes_per_token_per_layer() const {
    return static_cast<size_t>(heads) * static_cast<size_t>(k_dim + v_dim) * sizeof(float);
  }
};
KvCacheShape kv_cache_shape(const ModelConfig& config);

class KVCache {
 public:
  // v_head_dim: width of the V rows; -1 = head_dim, 0 = no V (MLA's latent cache).
  KVCache(int num_layers, int num_kv_heads, int head_dim, int64_t capacity, int v_head_dim = -1);

  float* k(int layer) { return k_.data() + static_cast<size_t>(layer) * layer_stride_; }
  float* v(int layer) { return v_.data() + static_cast<size_t>(layer) * v_layer_stride_; }
  int64_t capacity() const { return capacity_; }
  // Layer `layer`'s K and V as [num_kv_heads, capacity, head_dim] f32 views.
  KvView layer(int layer);
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

  // Writes m tokens' keys/values, keys [m, num_kv_heads * head_dim] and values
  // [m, num_kv_heads * v_head_dim] f32 contiguous (values ignored when v_head_dim is 0),
  // at positions [start_pos, start_pos + m) of `layer`. Requires
  // start_pos + m <= capacity (MOE_CHECK).
  void write(int layer, int64_t start_pos, const TensorView& keys, const TensorView& values);

 private:
  int num_kv_heads_, head_dim_, v_head_dim_;
  int64_t capacity_;
  size_t layer_stride_, v_layer_stride_;
  std::vector<float> k_, v_;
};

}  // namespace moe
