// Tensor: an n-d array (up to 4 dims) of one dtype on one device. A TensorView does not
// own its data; a Tensor owns a 64-byte-aligned buffer and hands out views.
//
//   Tensor x = Tensor::empty(DType::kF32, {num_tokens, hidden});  // [num_tokens, hidden]
//   TensorView v = x.view();
//   float* row = v.row<float>(t);
//
// Strides are in elements, row-major by default (the last dim contiguous). Kernels take
// views, check shapes and dtype once at their entry (ops/*.h), then compute on raw
// pointers. Device: only kCpu today; a CUDA backend adds kCuda and its own allocations
// (a kernel for a device lives in ops/<op>_cpu.cc / ops/<op>_cuda.cu, chosen by the op's
// entry).
// Thread-safety: views are plain values; concurrent writes to one buffer are the
// caller's business.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "moe/tensor/dtype.h"

namespace moe {

enum class Device : uint8_t { kCpu };

inline const char* device_name(Device d) { return d == Device::kCpu ? "cpu" : "?"; }

constexpr int kMaxTensorDims = 4;

class TensorView {
 public:
  TensorView() = default;
  // A contiguous row-major view of `data` with `shape`.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::kCpu);
  // Convenience: a contiguous f32 view (const data is the caller's promise).
  static TensorView f32(const float* data, std::initializer_list<int64_t> shape) {
    return TensorView(const_cast<float*>(data), DType::kF32, shape);
  }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i)]; }
  int64_t stride(int i) const { return strides_[static_cast<size_t>(i)]; }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return numel() == 0; }
  bool is_contiguous() const;
  // Pointer to element [r, 0, ...] (rows along dim 0).
  template <typename T>
  T* row(int64_t r) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(data_) +
                                static_cast<size_t>(r * strides_[0]) * dtype_size(dtype_));
  }
  // Rows [begin, begin + n) along dim 0 (same strides).
  TensorView rows(int64_t begin, int64_t n) const;
  // "[4, 64] f32 cpu": for error messages.
  std::string describe() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  int ndim_ = 0;
  std::array<int64_t, kMaxTensorDims> shape_{};
  std::array<int64_t, kMaxTensorDims> strides_{};
};

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised storage for `shape` (64-byte aligned). Zero-size shapes allocate nothing.
  static Tensor empty(DType dtype, std::initializer_list<int64_t> shape, Device device = Device::kCpu);
  static Tensor zeros(DType dtype, std::initializer_list<int64_t> shape, Device device = Device::kCpu);

  TensorView view() const { return view_; }
  void* data() const { return view_.data(); }
  template <typename T>
  T* data_as() const { return view_.data_as<T>(); }
  DType dtype() const { return view_.dtype(); }
  int64_t dim(int i) const { return view_.dim(i); }
  int64_t numel() const { return view_.numel(); }
  size_t bytes() const { return view_.bytes(); }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> storage_;
  TensorView view_;
};

}  // namespace moe
