#include "moe/transformer/kv_cache.h"

#include <cstring>

#include "moe/core/check.h"

namespace moe {

KvCacheShape kv_cache_shape(const ModelConfig& c) {
  if (c.mla.enabled()) return KvCacheShape{1, c.mla.kv_lora_rank + c.mla.qk_rope_head_dim, 0};
  return KvCacheShape{c.num_key_value_heads, c.head_dim, c.head_dim};
}

KVCache::KVCache(int num_layers, int num_kv_heads, int head_dim, int64_t capacity, int v_head_dim)
    : num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      v_head_dim_(v_head_dim < 0 ? head_dim : v_head_dim),
      capacity_(capacity),
      layer_stride_(static_cast<size_t>(num_kv_heads) * static_cast<size_t>(capacity) * static_cast<size_t>(head_dim)),
      v_layer_stride_(static_cast<size_t>(num_kv_heads) * static_cast<size_t>(capacity) *
                      static_cast<size_t>(v_head_dim_)),
      k_(layer_stride_ * static_cast<size_t>(num_layers)),
      v_(v_layer_stride_ * static_cast<size_t>(num_layers)) {}

KvView KVCache::layer(int layer) {
  return {TensorView(k(layer), DType::kF32, {num_kv_heads_, capacity_, head_dim_}),
          TensorView(v(layer), DType::kF32, {num_kv_heads_, capacity_, v_head_dim_})};
}

void KVCache::write(int layer, int64_t start_pos, const TensorView& key_rows, const TensorView& value_rows) {
  const int64_t m = key_rows.dim(0);
  MOE_CHECK(key_rows.dtype() == DType::kF32 && value_rows.dtype() == DType::kF32);
  MOE_CHECK(key_rows.ndim() == 2 && value_rows.ndim() == 2 && value_rows.dim(0) == m);
  MOE_CHECK(key_rows.dim(1) == static_cast<int64_t>(num_kv_heads_) * head_dim_);
  MOE_CHECK(v_head_dim_ == 0 || value_rows.dim(1) == static_cast<int64_t>(num_kv_heads_) * v_head_dim_);
  MOE_CHECK(key_rows.is_contiguous() && value_rows.is_contiguous());
  MOE_CHECK(start_pos >= 0 && start_pos + m <= capacity_);
  const float* keys = key_rows.data_as<const float>();
  const float* values = value_rows.data_as<const float>();
  float* kl = k(layer);
  float* vl = v(layer);
  const int64_t row = static_cast<int64_t>(num_kv_heads_) * head_dim_;
  const int64_t v_row = static_cast<int64_t>(num_kv_heads_) * v_head_dim_;
  for (int64_t t = 0; t < m; ++t) {
    for (int h = 0; h < num_kv_heads_; ++h) {
      const size_t slot = static_cast<size_t>(h) * static_cast<size_t>(capacity_) + static_cast<size_t>(start_pos + t);
      std::memcpy(kl + slot * static_cast<size_t>(head_dim_), keys + t * row + h * head_dim_,
                  static_cast<size_t>(head_dim_) * sizeof(float));
      if (v_head_dim_ > 0) {
        std::memcpy(vl + slot * static_cast<size_t>(v_head_dim_), values + t * v_row + h * v_head_dim_,
                    static_cast<size_t>(v_head_dim_) * sizeof(float));
      }
    }
  }
}

}  // namespace moe
