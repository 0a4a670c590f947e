#include "moe/ops/linear_fp8_cpu.h"

#include <immintrin.h>

#include <algorithm>

#include "moe/core/check.h"
#include "moe/tensor/fp8_simd.h"

namespace moe {
namespace {

inline float hsum8(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  return _mm_cvtss_f32(_mm_add_ss(s, sh));
}

// Rows [r0, r1), M tokens, R rows at a time with two accumulators per (row, token).
// Per column block: the block's scale is broadcast once, each 8 decoded weights are
// multiplied by it and FMA'd into the accumulators; a block's tail (cols not a multiple
// of 8) is summed in scalar into `tail`. Nothing here depends on M or R.
template <int M, int R>
void gemv_fp8_rows(const float* x, const Weight2D& w, float* y, int64_t r0, int64_t r1) {
  const int64_t k = w.cols, bc = w.block_cols;
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const uint8_t* rows[R];
    int64_t srow[R];
    for (int i = 0; i < R; ++i) {
      rows[i] = w.row(r + i);
      srow[i] = w.scale_row_of(r + i);
    }
    __m256 acc[R][M][2];
    float tail[R][M];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t) {
        acc[i][t][0] = acc[i][t][1] = _mm256_setzero_ps();
        tail[i][t] = 0.0f;
      }
    const uint8_t* next = (r + 2 * R <= r1) ? w.row(r + R) : nullptr;
    for (int64_t j0 = 0, cb = 0; j0 < k; j0 += bc, ++cb) {
      const int64_t j1 = std::min(k, j0 + bc);
      float s[R];
      __m256 sv[R];
      for (int i = 0; i < R; ++i) {
        s[i] = w.block_scale(srow[i], cb);
        sv[i] = _mm256_set1_ps(s[i]);
      }
      int64_t j = j0;
      for (; j + 16 <= j1; j += 16) {
        if (next != nullptr && (j & 63) == 0) {
          for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(next + i * k + j), _MM_HINT_T0);
        }
        for (int u = 0; u < 2; ++u) {
          __m256 xv[M];
          for (int t = 0; t < M; ++t) xv[t] = _mm256_loadu_ps(x + t * k + j + 8 * u);
          for (int i = 0; i < R; ++i) {
            const __m256 wv = _mm256_mul_ps(f8e4m3x8_to_f32(rows[i] + j + 8 * u), sv[i]);
            for (int t = 0; t < M; ++t) acc[i][t][u] = _mm256_fmadd_ps(wv, xv[t], acc[i][t][u]);
          }
        }
      }
      for (; j + 8 <= j1; j += 8) {
        for (int i = 0; i < R; ++i) {
          const __m256 wv = _mm256_mul_ps(f8e4m3x8_to_f32(rows[i] + j), sv[i]);
          for (int t = 0; t < M; ++t) acc[i][t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * k + j), acc[i][t][0]);
        }
      }
      for (; j < j1; ++j) {
        for (int i = 0; i < R; ++i) {
          const float wf = f8e4m3_to_f32(rows[i][j]) * s[i];
          for (int t = 0; t < M; ++t) tail[i][t] += wf * x[t * k + j];
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t) y[t * w.rows + r + i] = hsum8(_mm256_add_ps(acc[i][t][0], acc[i][t][1])) + tail[i][t];
  }
  if constexpr (R > 1) {
    if (r < r1) gemv_fp8_rows<M, 1>(x, w, y, r, r1);
  }
}

}  // namespace

void gemv_fp8_range(const LinearJob& job, int64_t r0, int64_t r1) {
  const float* x = job.x;
  const int64_t m = job.m;
  const Weight2D& w = *job.w;
  float* y = job.y;
  MOE_CHECK(w.dtype == DType::kF8E4M3 && w.has_scale() && w.block_rows > 0 && w.block_cols > 0);
#if !defined(__AVX2__) || !defined(__FMA__)
  gemv_fp8_range_scalar(job, r0, r1);  // a build for a CPU without AVX2/FMA
  return;
#endif
  switch (m) {
    case 1: gemv_fp8_rows<1, 4>(x, w, y, r0, r1); break;
    case 2: gemv_fp8_rows<2, 4>(x, w, y, r0, r1); break;
    case 3: gemv_fp8_rows<3, 2>(x, w, y, r0, r1); break;
    case 4: gemv_fp8_rows<4, 2>(x, w, y, r0, r1); break;
    default: MOE_CHECK(false && "fp8 gemv supports m <= 4");
  }
}

void gemv_fp8_range_scalar(const LinearJob& job, int64_t r0, int64_t r1) {
  const float* x = job.x;
  const int64_t m = job.m;
  const Weight2D& w = *job.w;
  float* y = job.y;
  MOE_CHECK(w.dtype == DType::kF8E4M3 && w.has_scale() && w.block_rows > 0 && w.block_cols > 0);
  const int64_t k = w.cols;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.row(r);
    for (int64_t t = 0; t < m; ++t) {
      float sum = 0.0f;
      for (int64_t j0 = 0, cb = 0; j0 < k; j0 += w.block_cols, ++cb) {
        const float s = w.block_scale(w.scale_row_of(r), cb);
        const int64_t j1 = std::min(k, j0 + w.block_cols);
        for (int64_t j = j0; j < j1; ++j) sum += (f8e4m3_to_f32(row[j]) * s) * x[t * k + j];
      }
      y[t * w.rows + r] = sum;
    }
  }
}

}  // namespace moe
