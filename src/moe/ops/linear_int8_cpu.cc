// The AVX2 (baseline) half of the int8 kernels in ops/linear_kernels.h: the q8
// quantiser of activations and the maddubs GEMV. The VNNI GEMV is in linear_avx512.cc.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "moe/core/check.h"
#include "moe/ops/linear_kernels.h"

namespace moe {
namespace {

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The same sums, in the same order, as avx512.cc's gemv_q8_rows: maddubs forms pairs of
// |w| * (+-x) (at most 2 * 127 * 127, no saturation since codes are in [-127, 127]) and
// madd adds pairs of those, which is vpdpbusd's integer result exactly.
template <int M, int R>
void gemv_q8_rows_avx2(const GemvCall& c, int64_t t0, int64_t r0, int64_t r1) {
  const Weight2D& w = *c.job.w;
  const int64_t k = w.cols, nb = k / kQ8Block;
  const int8_t* xq = c.x_q + t0 * k;
  const float* xd = c.x_d + t0 * nb;
  float* y = c.job.y + t0 * w.rows;
  const float* scales = static_cast<const float*>(w.scale);
  const __m256i ones = _mm256_set1_epi16(1);
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const int8_t* rows[R];
    const float* ds[R];
    for (int i = 0; i < R; ++i) {
      rows[i] = reinterpret_cast<const int8_t*>(w.row(r + i));
      ds[i] = scales + w.scale_row_of(r + i) * nb;
    }
    __m256 acc[R][M];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t) acc[i][t] = _mm256_setzero_ps();
    const int8_t* next = (R > 1 && r + 2 * R <= r1) ? reinterpret_cast<const int8_t*>(w.row(r + R)) : nullptr;
    // Scale products as in avx512.cc: a lane of a vector product per group of 8 blocks.
    auto block = [&](int64_t b, auto scale) {
      if (next != nullptr && (b & 1) == 0) {
        for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(next + i * k + b * kQ8Block), _MM_HINT_T0);
      }
      __m256i xv[M];
      for (int t = 0; t < M; ++t) xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * k + b * kQ8Block));
      for (int i = 0; i < R; ++i) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + b * kQ8Block));
        const __m256i aw = _mm256_sign_epi8(wv, wv);
        for (int t = 0; t < M; ++t) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv[t], wv)), ones);
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale(i, t), acc[i][t]);
        }
      }
    };
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      __m256 sc[R][M];
      for (int i = 0; i < R; ++i)
        for (int t = 0; t < M; ++t) sc[i][t] = _mm256_mul_ps(_mm256_loadu_ps(ds[i] + b), _mm256_loadu_ps(xd + t * nb + b));
      for (int j = 0; j < 8; ++j) {
        const __m256i lane = _mm256_set1_epi32(j);
        block(b + j, [&](int i, int t) { return _mm256_permutevar8x32_ps(sc[i][t], lane); });
      }
    }
    for (; b < nb; ++b) block(b, [&](int i, int t) { return _mm256_set1_ps(ds[i][b] * xd[t * nb + b]); });
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t) y[t * w.rows + r + i] = hsum8(acc[i][t]);
  }
  if constexpr (R > 1) {
    if (r < r1) gemv_q8_rows_avx2<M, 1>(c, t0, r, r1);
  }
}

}  // namespace

void gemv_int8_avx2_range(const GemvCall& call, int64_t r0, int64_t r1) {
  const Weight2D& w = *call.job.w;
  MOE_CHECK(w.dtype == DType::kI8 && w.has_scale() && w.block_rows == 1 && w.block_cols == kQ8Block &&
            w.scale_dtype == DType::kF32 && w.cols % kQ8Block == 0 && call.x_q != nullptr);
  for (int64_t t0 = 0; t0 < call.job.m; t0 += 4) {
    switch (std::min<int64_t>(4, call.job.m - t0)) {
      case 1: gemv_q8_rows_avx2<1, 1>(call, t0, r0, r1); break;
      case 2: gemv_q8_rows_avx2<2, 4>(call, t0, r0, r1); break;
      case 3: gemv_q8_rows_avx2<3, 2>(call, t0, r0, r1); break;
      default: gemv_q8_rows_avx2<4, 2>(call, t0, r0, r1); break;
    }
  }
}

void quantize_q8_rows(const float* x, int64_t m, int64_t k, int8_t* q, float* d) {
  MOE_CHECK(k % kQ8Block == 0);
  const int64_t nb = k / kQ8Block;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < m * nb; ++i) {
    const float* v = x + i * kQ8Block;
    __m256 amax = _mm256_setzero_ps();
    for (int u = 0; u < 4; ++u) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(v + 8 * u)));
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    a = _mm_max_ss(a, _mm_movehdup_ps(a));
    const float dv = _mm_cvtss_f32(a) / 127.0f;
    const float id = dv != 0.0f ? 1.0f / dv : 0.0f;
    d[i] = dv;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i qi[4];
    for (int u = 0; u < 4; ++u) {
      // nearbyint (round to nearest even under the default MXCSR).
      qi[u] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * u), idv));
    }
    // int32 -> int8 in order: packs interleave 128-bit lanes, the permute restores it.
    const __m256i p16a = _mm256_packs_epi32(qi[0], qi[1]);
    const __m256i p16b = _mm256_packs_epi32(qi[2], qi[3]);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    const __m256i ordered = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i * kQ8Block), ordered);
  }
}

}  // namespace moe
