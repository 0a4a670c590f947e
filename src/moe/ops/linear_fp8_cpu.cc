#include "moe/ops/linear_fp8_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

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
void gemv_fp8_rows(const float* x, const Weight2D& w, float* y, int64_t r0, int64_t r1, bool fast_ok) {
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
    const uint8_t* next = (R > 1 && r + 2 * R <= r1) ? w.row(r + R) : nullptr;
    for (int64_t j0 = 0, cb = 0; j0 < k; j0 += bc, ++cb) {
      const int64_t j1 = std::min(k, j0 + bc);
      float s[R];
      __m256 sv[R];
      for (int i = 0; i < R; ++i) {
        s[i] = w.block_scale(srow[i], cb);
        sv[i] = _mm256_set1_ps(s[i]);
      }
      int64_t j = j0;
      // Fast decode (fast_ok, see gemv_fp8_range): a code's sign and magnitude bits moved
      // into an f32 (sign-extend, shift by 20, mask) are its value times 2^-120 (an f32
      // denormal for the subnormal codes), so one multiply by scale * 2^120 gives
      // value * scale, rounded once: bitwise the exact path's product. 16 codes are checked
      // at once for NaN (0x7f/0xff) and subnormal codes; a group with one takes the exact
      // (integer) decoder.
      bool fast[R];
      __m256 sv_fast[R];
      for (int i = 0; i < R; ++i) {
        fast[i] = fast_ok && std::fabs(s[i]) < 0x1p7f;  // s * 2^120 stays finite
        sv_fast[i] = _mm256_set1_ps(s[i] * 0x1p120f);
      }
      for (; j + 16 <= j1; j += 16) {
        if (next != nullptr && (j & 63) == 0) {
          for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(next + i * k + j), _MM_HINT_T0);
        }
        __m256 xv[2][M];
        for (int u = 0; u < 2; ++u)
          for (int t = 0; t < M; ++t) xv[u][t] = _mm256_loadu_ps(x + t * k + j + 8 * u);
        for (int i = 0; i < R; ++i) {
          const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + j));
          const __m128i mag = _mm_and_si128(b, _mm_set1_epi8(0x7f));
          // NaN codes, and subnormal ones (1..7: an f32 denormal here, which costs a
          // microcode assist per multiply on many CPUs; rare in real checkpoints).
          const __m128i le7 = _mm_cmpeq_epi8(_mm_min_epu8(mag, _mm_set1_epi8(7)), mag);
          const __m128i zero = _mm_cmpeq_epi8(mag, _mm_setzero_si128());
          const __m128i odd = _mm_or_si128(_mm_cmpeq_epi8(mag, _mm_set1_epi8(0x7f)), _mm_andnot_si128(zero, le7));
          __m256 wv[2];
          if (fast[i] && _mm_testz_si128(odd, odd)) {
            const __m256i mask = _mm256_set1_epi32(static_cast<int>(0x87f00000u));
            const __m256i lo = _mm256_slli_epi32(_mm256_cvtepi8_epi32(b), 20);
            const __m256i hi = _mm256_slli_epi32(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)), 20);
            wv[0] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(lo, mask)), sv_fast[i]);
            wv[1] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(hi, mask)), sv_fast[i]);
          } else {
            wv[0] = _mm256_mul_ps(f8e4m3x8_to_f32(rows[i] + j), sv[i]);
            wv[1] = _mm256_mul_ps(f8e4m3x8_to_f32(rows[i] + j + 8), sv[i]);
          }
          for (int u = 0; u < 2; ++u)
            for (int t = 0; t < M; ++t) acc[i][t][u] = _mm256_fmadd_ps(wv[u], xv[u][t], acc[i][t][u]);
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
    if (r < r1) gemv_fp8_rows<M, 1>(x, w, y, r, r1, fast_ok);
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
  // The fast decode relies on f32 denormal inputs being honoured: not with MXCSR's
  // denormals-are-zero bit (set by -ffast-math start-up code, for one).
  const bool fast_ok = (_mm_getcsr() & 0x0040u) == 0;
  switch (m) {
    case 1: gemv_fp8_rows<1, 1>(x, w, y, r0, r1, fast_ok); break;
    case 2: gemv_fp8_rows<2, 4>(x, w, y, r0, r1, fast_ok); break;
    case 3: gemv_fp8_rows<3, 2>(x, w, y, r0, r1, fast_ok); break;
    case 4: gemv_fp8_rows<4, 2>(x, w, y, r0, r1, fast_ok); break;
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
