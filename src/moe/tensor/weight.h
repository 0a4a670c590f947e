// A 2-D weight matrix viewed in place (usually inside a memory-mapped safetensors file).
//
// Layout is PyTorch Linear's: [rows = out_features, cols = in_features], row-major,
// dtype f32, bf16 or f16. Not owning: the checkpoint that maps it must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/tensor/dtype.h"

namespace moe {

struct Weight2D {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;  // out_features
  int64_t cols = 0;  // in_features

  size_t bytes() const { return static_cast<size_t>(rows * cols) * dtype_size(dtype); }
  // Pointer to the start of row r.
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r * cols) * dtype_size(dtype);
  }
};

}  // namespace moe
