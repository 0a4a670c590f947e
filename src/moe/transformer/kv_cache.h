// Key/value cache for one sequence: per layer, K and V as [num_kv_heads, capacity,
// head_dim] f32 (heads outermost so attention reads each head contiguously).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moe/ops/attention.h"
#include "moe/tensor/tensor.h"

namespace moe {

class KVCache {
 public:
  KVCache(int num_layers, int num_kv_heads, int head_dim, int64_t capacity);

  float* k(int layer) { return k_.data() + static_cast<size_t>(layer) * layer_stride_; }
  float* v(int layer) { return v_.data() + static_cast<size_t>(layer) * layer_stride_; }
  int64_t capacity() const { return capacity_; }
  // Layer `layer`'s K and V as [num_kv_heads, capacity, head_dim] f32 views.
  KvView layer(int layer);
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

  // Writes m tokens' keys/values, keys and values [m, num_kv_heads * head_dim] f32
  // contiguous, at positions [start_pos, start_pos + m) of `layer`. Requires
  // start_pos + m <= capacity (MOE_CHECK).
  void write(int layer, int64_t start_pos, const TensorView& keys, const TensorView& values);

 private:
  int num_kv_heads_, head_dim_;
  int64_t capacity_;
  size_t layer_stride_;
  std::vector<float> k_, v_;
};

}  // namespace moe
