#include "moe/transformer/kv_cache.h"

#include <cstring>

#include "moe/core/check.h"

namespace moe {

KvCacheShape kv_cache_shape(const ModelConfig& c, DType dtype) {
  if (c.mla.enabled()) return KvCacheShape{1, c.mla.kv_lora_rank + c.mla.qk_rope_head_dim, 0, dtype};
  return KvCacheShape{c.num_key_value_heads, c.head_dim, c.head_dim, dtype};
}

const char* kv_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    default: return dtype_name(dtype);
  }
}

std::string kv_dtype_error(const ModelConfig& c, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return std::string("--kv-dtype ") + kv_dtype_name(dtype) + " is not one of f32, bf16, f16";
  }
  if (dtype != DType::kF32 && c.mla.enabled()) {
    return std::string("--kv-dtype ") + kv_dtype_name(dtype) +
           ": multi-head latent attention models (model_type '" + c.model_type +
           "') keep their latent KV cache in f32 only; use --kv-dtype f32";
  }
  return {};
}

namespace {

// Rounds n f32 values to dtype's elements at dst (f32: a copy).
void store_rows(const float* src, size_t n, DType dtype, void* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  uint16_t* d = static_cast<uint16_t*>(dst);
  if (dtype == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
  }
}

}  // namespace

KVCache::KVCache(int num_layers, int num_kv_heads, int head_dim, int64_t capacity, int v_head_dim)
    : KVCache(num_layers, KvCacheShape{num_kv_heads, head_dim, v_head_dim < 0 ? head_dim : v_head_dim, DType::kF32},
              capacity) {}

KVCache::KVCache(int num_layers, const KvCacheShape& shape, int64_t capacity)
    : num_kv_heads_(shape.heads),
      head_dim_(shape.k_dim),
      v_head_dim_(shape.v_dim),
      capacity_(capacity),
      dtype_(shape.dtype),
      layer_stride_(static_cast<size_t>(num_kv_heads_) * static_cast<size_t>(capacity) * static_cast<size_t>(head_dim_)),
      v_layer_stride_(static_cast<size_t>(num_kv_heads_) * static_cast<size_t>(capacity) *
                      static_cast<size_t>(v_head_dim_)),
      k_(Tensor::zeros(dtype_, {static_cast<int64_t>(layer_stride_) * num_layers})),
      v_(Tensor::zeros(dtype_, {static_cast<int64_t>(v_layer_stride_) * num_layers})) {
  MOE_CHECK(dtype_ == DType::kF32 || dtype_ == DType::kBF16 || dtype_ == DType::kF16);
}

float* KVCache::k(int layer) {
  MOE_CHECK(dtype_ == DType::kF32);
  return k_.data_as<float>() + static_cast<size_t>(layer) * layer_stride_;
}

float* KVCache::v(int layer) {
  MOE_CHECK(dtype_ == DType::kF32);
  return v_.data_as<float>() + static_cast<size_t>(layer) * v_layer_stride_;
}

KvView KVCache::layer(int layer) {
  const size_t es = dtype_size(dtype_);
  uint8_t* k = static_cast<uint8_t*>(k_.data()) + static_cast<size_t>(layer) * layer_stride_ * es;
  uint8_t* v = v_layer_stride_ == 0 ? nullptr
                                    : static_cast<uint8_t*>(v_.data()) + static_cast<size_t>(layer) * v_layer_stride_ * es;
  return {TensorView(k, dtype_, {num_kv_heads_, capacity_, head_dim_}),
          TensorView(v, dtype_, {num_kv_heads_, capacity_, v_head_dim_})};
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
  const KvView view = this->layer(layer);
  uint8_t* kl = static_cast<uint8_t*>(view.k.data());
  uint8_t* vl = static_cast<uint8_t*>(view.v.data());
  const size_t es = dtype_size(dtype_);
  const int64_t row = static_cast<int64_t>(num_kv_heads_) * head_dim_;
  const int64_t v_row = static_cast<int64_t>(num_kv_heads_) * v_head_dim_;
  for (int64_t t = 0; t < m; ++t) {
    for (int h = 0; h < num_kv_heads_; ++h) {
      const size_t slot = static_cast<size_t>(h) * static_cast<size_t>(capacity_) + static_cast<size_t>(start_pos + t);
      store_rows(keys + t * row + h * head_dim_, static_cast<size_t>(head_dim_), dtype_,
                 kl + slot * static_cast<size_t>(head_dim_) * es);
      if (v_head_dim_ > 0) {
        store_rows(values + t * v_row + h * v_head_dim_, static_cast<size_t>(v_head_dim_), dtype_,
                   vl + slot * static_cast<size_t>(v_head_dim_) * es);
      }
    }
  }
}

}  // namespace moe
