#include "moe/tensor/weight.h"

#include <algorithm>

namespace moe {

Weight2D row_block(const Weight2D& w, int64_t row0, int64_t rows) {
  Weight2D b = w;
  b.data = w.row(row0);
  b.rows = rows;
  if (w.has_scale()) {
    const int64_t first = w.scale_row_of(row0);
    b.scale = static_cast<const uint8_t*>(w.scale) + static_cast<size_t>(first * w.scale_cols()) * dtype_size(w.scale_dtype);
    b.row_phase = static_cast<int32_t>((row0 + w.row_phase) % w.block_rows);
  }
  return b;
}

void dequantize_rows_f32(const Weight2D& w, int64_t r0, int64_t r1, float* out) {
  const int64_t k = w.cols;
  const size_t n = static_cast<size_t>((r1 - r0) * k);
  if (n == 0) return;
  convert_to_f32(w.row(r0), w.dtype, out, n);
  if (!w.has_scale()) return;
  for (int64_t r = r0; r < r1; ++r) {
    float* o = out + (r - r0) * k;
    const int64_t br = w.scale_row_of(r);
    for (int64_t c0 = 0, cb = 0; c0 < k; c0 += w.block_cols, ++cb) {
      const float s = w.block_scale(br, cb);
      const int64_t c1 = std::min<int64_t>(k, c0 + w.block_cols);
      for (int64_t c = c0; c < c1; ++c) o[c] *= s;
    }
  }
}

}  // namespace moe
