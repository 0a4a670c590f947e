#include "moe/tensor/tensor.h"

#include <cstdlib>
#include <cstring>

#include "moe/core/check.h"

namespace moe {

TensorView::TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device), ndim_(static_cast<int>(shape.size())) {
  MOE_CHECK(shape.size() <= static_cast<size_t>(kMaxTensorDims));
  size_t i = 0;
  for (int64_t d : shape) {
    MOE_CHECK(d >= 0);
    shape_[i++] = d;
  }
  int64_t stride = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    strides_[static_cast<size_t>(d)] = stride;
    stride *= shape_[static_cast<size_t>(d)];
  }
}

int64_t TensorView::numel() const {
  if (ndim_ == 0) return data_ != nullptr ? 1 : 0;
  int64_t n = 1;
  for (int d = 0; d < ndim_; ++d) n *= shape_[static_cast<size_t>(d)];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    if (shape_[static_cast<size_t>(d)] != 1 && strides_[static_cast<size_t>(d)] != stride) return false;
    stride *= shape_[static_cast<size_t>(d)];
  }
  return true;
}

TensorView TensorView::rows(int64_t begin, int64_t n) const {
  MOE_CHECK(ndim_ >= 1 && begin >= 0 && n >= 0 && begin + n <= shape_[0]);
  TensorView v = *this;
  v.data_ = row<uint8_t>(begin);
  v.shape_[0] = n;
  return v;
}

std::string TensorView::describe() const {
  std::string s = "[";
  for (int d = 0; d < ndim_; ++d) s += (d ? ", " : "") + std::to_string(shape_[static_cast<size_t>(d)]);
  return s + "] " + dtype_name(dtype_) + " " + device_name(device_);
}

void Tensor::Free::operator()(void* p) const { std::free(p); }

Tensor Tensor::empty(DType dtype, std::initializer_list<int64_t> shape, Device device) {
  MOE_CHECK(device == Device::kCpu);
  Tensor t;
  t.view_ = TensorView(nullptr, dtype, shape, device);
  const size_t bytes = t.view_.bytes();
  if (bytes > 0) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    MOE_CHECK(p != nullptr);
    t.storage_.reset(p);
    t.view_ = TensorView(p, dtype, shape, device);
  }
  return t;
}

Tensor Tensor::zeros(DType dtype, std::initializer_list<int64_t> shape, Device device) {
  Tensor t = empty(dtype, shape, device);
  if (t.bytes() > 0) std::memset(t.data(), 0, t.bytes());
  return t;
}

}  // namespace moe
