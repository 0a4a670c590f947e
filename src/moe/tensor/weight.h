// A 2-D weight matrix viewed in place (usually inside a memory-mapped safetensors file).
//
// Layout is PyTorch Linear's: [rows = out_features, cols = in_features], row-major,
// dtype f32, bf16, f16 or fp8 e4m3. Not owning: the checkpoint that maps it must outlive it.
//
// FP8 (dtype kF8E4M3, DeepSeek-V3's block quantisation): the real weight is
//   W[r, c] = f8e4m3_to_f32(data[r, c]) * scale[r / block_rows, c / block_cols]
// with `scale` the checkpoint's `<name>_scale_inv` tensor, [scale_rows(), scale_cols()]
// row-major, of dtype `scale_dtype` (f32, bf16 or f16), possibly unaligned. Like `data`
// it is not owned: it lives in the same mapped file or buffer as the weight (an expert
// that is copied, migrated or stored must carry it along: see bytes()). For other
// dtypes scale is null and the block sizes are 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "moe/tensor/dtype.h"

namespace moe {

struct Weight2D {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;  // out_features
  int64_t cols = 0;  // in_features
  // FP8 block scales (dtype kF8E4M3 only; see above).
  const void* scale = nullptr;
  DType scale_dtype = DType::kF32;
  int32_t block_rows = 0, block_cols = 0;
  // For a view of rows [row0, ...) of a larger FP8 matrix (row_block): row0 % block_rows,
  // with `scale` at block row row0 / block_rows. Row r's block row is then
  // (r + row_phase) / block_rows. 0 for a whole matrix.
  int32_t row_phase = 0;

  bool has_scale() const { return scale != nullptr; }
  int64_t scale_rows() const { return block_rows > 0 ? (rows + row_phase + block_rows - 1) / block_rows : 0; }
  // The block row of row r (has_scale() only).
  int64_t scale_row_of(int64_t r) const { return (r + row_phase) / block_rows; }
  int64_t scale_cols() const { return block_cols > 0 ? (cols + block_cols - 1) / block_cols : 0; }
  // Bytes of the block scales (0 without).
  size_t scale_bytes() const {
    return has_scale() ? static_cast<size_t>(scale_rows() * scale_cols()) * dtype_size(scale_dtype) : 0;
  }
  // Bytes of the matrix itself (rows * cols * element size).
  size_t data_bytes() const { return static_cast<size_t>(rows * cols) * dtype_size(dtype); }
  // Everything a copy of this weight must carry: the matrix and its block scales.
  size_t bytes() const { return data_bytes() + scale_bytes(); }
  // Pointer to the start of row r.
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r * cols) * dtype_size(dtype);
  }
  // The scale of block (block_row, block_col), as f32 (has_scale() only).
  float block_scale(int64_t block_row, int64_t block_col) const {
    const size_t i = static_cast<size_t>(block_row * scale_cols() + block_col);
    const uint8_t* p = static_cast<const uint8_t*>(scale) + i * dtype_size(scale_dtype);
    if (scale_dtype == DType::kF32) {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, p, sizeof h);
    return scale_dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
};

// Rows [row0, row0 + rows) of w, in place (same dtype; an FP8 view keeps its scales).
Weight2D row_block(const Weight2D& w, int64_t row0, int64_t rows);

// out[(r - r0) * cols + c] = W[r, c] as f32 for rows [r0, r1): the stored value, times
// its block scale for fp8 (f8e4m3_to_f32(code) * scale, rounded once in f32, the same
// product the fp8 GEMV kernel forms). out must hold (r1 - r0) * cols floats.
void dequantize_rows_f32(const Weight2D& w, int64_t r0, int64_t r1, float* out);

}  // namespace moe
