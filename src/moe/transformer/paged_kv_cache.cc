#include "moe/transformer/paged_kv_cache.h"

#include <cstring>

#include "moe/core/check.h"

namespace moe {

PagedKVCache::PagedKVCache(int num_layers, const KvCacheShape& shape, int block_size, int64_t num_blocks)
    : num_kv_heads_(shape.heads),
      head_dim_(shape.k_dim),
      v_head_dim_(shape.v_dim),
      block_size_(block_size),
      num_blocks_(num_blocks),
      dtype_(shape.dtype),
      layer_stride_(static_cast<size_t>(num_blocks) * static_cast<size_t>(num_kv_heads_) *
                    static_cast<size_t>(block_size) * static_cast<size_t>(head_dim_)),
      v_layer_stride_(static_cast<size_t>(num_blocks) * static_cast<size_t>(num_kv_heads_) *
                      static_cast<size_t>(block_size) * static_cast<size_t>(v_head_dim_)),
      k_(Tensor::zeros(dtype_, {static_cast<int64_t>(layer_stride_) * num_layers})),
      v_(Tensor::zeros(dtype_, {static_cast<int64_t>(v_layer_stride_) * num_layers})) {
  MOE_CHECK(dtype_ == DType::kF32 || dtype_ == DType::kBF16 || dtype_ == DType::kF16);
}

const float* PagedKVCache::k_layer(int layer) const {
  MOE_CHECK(dtype_ == DType::kF32);
  return k_.data_as<const float>() + static_cast<size_t>(layer) * layer_stride_;
}

const float* PagedKVCache::v_layer(int layer) const {
  MOE_CHECK(dtype_ == DType::kF32);
  return v_.data_as<const float>() + static_cast<size_t>(layer) * v_layer_stride_;
}

KvView PagedKVCache::layer(int layer) const {
  const size_t es = dtype_size(dtype_);
  uint8_t* k = static_cast<uint8_t*>(k_.data()) + static_cast<size_t>(layer) * layer_stride_ * es;
  uint8_t* v = v_layer_stride_ == 0 ? nullptr
                                    : static_cast<uint8_t*>(v_.data()) + static_cast<size_t>(layer) * v_layer_stride_ * es;
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

BlockAllocator::BlockAllocator(int64_t num_blocks) : total_(num_blocks) {
  free_.reserve(static_cast<size_t>(num_blocks));
  // Popped from the back: low ids first.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

bool BlockAllocator::allocate(int64_t count, std::vector<int32_t>* out) {
  if (count > free_blocks()) return false;
  for (int64_t i = 0; i < count; ++i) {
    out->push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockAllocator::release(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) free_.push_back(b);
  MOE_CHECK(free_blocks() <= total_);
}

}  // namespace moe
