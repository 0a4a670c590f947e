#include "moe/transformer/paged_kv_cache.h"

#include <algorithm>
#include <cstring>

#include "moe/core/check.h"

namespace moe {

PagedKVCache::PagedKVCache(int num_layers, const KvCacheShape& shape, int block_size, int64_t num_blocks)
    : num_layers_(num_layers),
      num_kv_heads_(shape.heads),
      head_dim_(shape.k_dim),
      v_head_dim_(shape.v_dim),
      block_size_(block_size),
      num_blocks_(num_blocks),
      dtype_(shape.dtype),
      layer_stride_(static_cast<size_t>(num_blocks) * static_cast<size_t>(num_kv_heads_) *
                    static_cast<size_t>(block_size) * static_cast<size_t>(head_dim_)),
      v_layer_stride_(static_cast<size_t>(num_blocks) * static_cast<size_t>(num_kv_heads_) *
                      static_cast<size_t>(block_size) * static_cast<size_t>(v_head_dim_)),
      k_bytes_(layer_stride_ * static_cast<size_t>(num_layers) * dtype_size(dtype_)),
      v_bytes_(v_layer_stride_ * static_cast<size_t>(num_layers) * dtype_size(dtype_)),
      arena_(k_bytes_ + v_bytes_ + 128),
      k_(arena_.allocate(k_bytes_)),
      v_(arena_.allocate(v_bytes_)) {
  MOE_CHECK(dtype_ == DType::kF32 || dtype_ == DType::kBF16 || dtype_ == DType::kF16);
}

const float* PagedKVCache::k_layer(int layer) const {
  MOE_CHECK(dtype_ == DType::kF32);
  return reinterpret_cast<const float*>(k_) + static_cast<size_t>(layer) * layer_stride_;
}

const float* PagedKVCache::v_layer(int layer) const {
  MOE_CHECK(dtype_ == DType::kF32);
  return reinterpret_cast<const float*>(v_) + static_cast<size_t>(layer) * v_layer_stride_;
}

KvView PagedKVCache::layer(int layer) const {
  const size_t es = dtype_size(dtype_);
  uint8_t* k = k_ + static_cast<size_t>(layer) * layer_stride_ * es;
  uint8_t* v = v_layer_stride_ == 0 ? nullptr : v_ + static_cast<size_t>(layer) * v_layer_stride_ * es;
  return {TensorView(k, dtype_, {num_blocks_, num_kv_heads_, block_size_, head_dim_}),
          TensorView(v, dtype_, {num_blocks_, num_kv_heads_, block_size_, v_head_dim_})};
}

namespace {

// Rounds n f32 values to dtype's elements at dst (f32: a copy).
void store_row(const float* src, size_t n, DType dtype, uint8_t* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

}  // namespace

void PagedKVCache::write(int layer, const int32_t* block_table, int64_t start_pos, const TensorView& key_rows,
                         const TensorView& value_rows) {
  const int64_t m = key_rows.dim(0);
  MOE_CHECK(key_rows.dtype() == DType::kF32 && value_rows.dtype() == DType::kF32);
  MOE_CHECK(key_rows.ndim() == 2 && value_rows.ndim() == 2 && value_rows.dim(0) == m);
  MOE_CHECK(key_rows.dim(1) == static_cast<int64_t>(num_kv_heads_) * head_dim_);
  MOE_CHECK(v_head_dim_ == 0 || value_rows.dim(1) == static_cast<int64_t>(num_kv_heads_) * v_head_dim_);
  MOE_CHECK(key_rows.is_contiguous() && value_rows.is_contiguous());
  const float* keys = key_rows.data_as<const float>();
  const float* values = value_rows.data_as<const float>();
  const KvView view = this->layer(layer);
  uint8_t* kl = static_cast<uint8_t*>(view.k.data());
  uint8_t* vl = static_cast<uint8_t*>(view.v.data());
  const size_t es = dtype_size(dtype_);
  const int64_t row = static_cast<int64_t>(num_kv_heads_) * head_dim_;
  const int64_t v_row = static_cast<int64_t>(num_kv_heads_) * v_head_dim_;
  for (int64_t t = 0; t < m; ++t) {
    const int64_t pos = start_pos + t;
    const int64_t block = block_table[pos / block_size_];
    MOE_CHECK(block >= 0 && block < num_blocks_);
    const int64_t off = pos % block_size_;
    for (int h = 0; h < num_kv_heads_; ++h) {
      const size_t slot = static_cast<size_t>((block * num_kv_heads_ + h) * block_size_ + off);
      store_row(keys + t * row + h * head_dim_, static_cast<size_t>(head_dim_), dtype_,
                kl + slot * static_cast<size_t>(head_dim_) * es);
      if (v_head_dim_ > 0) {
        store_row(values + t * v_row + h * v_head_dim_, static_cast<size_t>(v_head_dim_), dtype_,
                  vl + slot * static_cast<size_t>(v_head_dim_) * es);
      }
    }
  }
}

size_t PagedKVCache::block_bytes() const {
  const size_t rows = static_cast<size_t>(num_kv_heads_) * static_cast<size_t>(block_size_);
  return static_cast<size_t>(num_layers_) * rows * static_cast<size_t>(head_dim_ + v_head_dim_) * dtype_size(dtype_);
}

void PagedKVCache::read_block(int32_t block, std::span<uint8_t> bytes) const {
  MOE_CHECK(block >= 0 && block < num_blocks_ && bytes.size() == block_bytes());
  const size_t es = dtype_size(dtype_), rows = static_cast<size_t>(num_kv_heads_) * static_cast<size_t>(block_size_);
  const size_t k = rows * static_cast<size_t>(head_dim_) * es, v = rows * static_cast<size_t>(v_head_dim_) * es;
  uint8_t* out = bytes.data();
  for (int l = 0; l < num_layers_; ++l) {
    std::memcpy(out, k_ + (static_cast<size_t>(l) * layer_stride_ * es + static_cast<size_t>(block) * k), k);
    out += k;
    if (v > 0) std::memcpy(out, v_ + (static_cast<size_t>(l) * v_layer_stride_ * es + static_cast<size_t>(block) * v), v);
    out += v;
  }
}

void PagedKVCache::write_block(int32_t block, std::span<const uint8_t> bytes) {
  MOE_CHECK(block >= 0 && block < num_blocks_ && bytes.size() == block_bytes());
  const size_t es = dtype_size(dtype_), rows = static_cast<size_t>(num_kv_heads_) * static_cast<size_t>(block_size_);
  const size_t k = rows * static_cast<size_t>(head_dim_) * es, v = rows * static_cast<size_t>(v_head_dim_) * es;
  const uint8_t* in = bytes.data();
  for (int l = 0; l < num_layers_; ++l) {
    std::memcpy(k_ + (static_cast<size_t>(l) * layer_stride_ * es + static_cast<size_t>(block) * k), in, k);
    in += k;
    if (v > 0) std::memcpy(v_ + (static_cast<size_t>(l) * v_layer_stride_ * es + static_cast<size_t>(block) * v), in, v);
    in += v;
  }
}

}  // namespace moe
