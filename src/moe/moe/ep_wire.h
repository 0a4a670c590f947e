// Activations on the wire between expert-parallel ranks: f32 as is, or bf16 (round to
// nearest even) to halve the bytes. Shared by the flat and hierarchical exchanges.
#pragma once

#include <cstdint>
#include <cstring>

#include "moe/tensor/dtype.h"

namespace moe {

// n floats -> n * (bf16 ? 2 : 4) bytes at dst.
inline void pack_activations(const float* src, int64_t n, bool bf16, uint8_t* dst) {
  if (!bf16) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
}

// The inverse: n values from src into f32 dst.
inline void unpack_activations(const uint8_t* src, int64_t n, bool bf16, float* dst) {
  if (!bf16) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  convert_to_f32(src, DType::kBF16, dst, static_cast<size_t>(n));
}

}  // namespace moe
