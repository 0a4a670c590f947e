#include "moe/ops/linear.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "moe/core/check.h"

namespace moe {
namespace {

// 8 weights of dtype D at p -> 8 floats.
template <DType D>
inline __m256 load8(const uint8_t* p);

template <>
inline __m256 load8<DType::kF32>(const uint8_t* p) {
  return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
}
template <>
inline __m256 load8<DType::kBF16>(const uint8_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
template <>
inline __m256 load8<DType::kF16>(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <DType D>
inline float load1(const uint8_t* p) {
  if constexpr (D == DType::kF32) {
    return *reinterpret_cast<const float*>(p);
  } else if constexpr (D == DType::kBF16) {
    return bf16_to_f32(*reinterpret_cast<const uint16_t*>(p));
  } else {
    return f16_to_f32(*reinterpret_cast<const uint16_t*>(p));
  }
}

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

// y[t, r] for rows [r0, r1) and M tokens: each weight row is read once. R rows are
// processed together with U accumulators each, so R*M*U independent FMA chains hide
// the FMA latency (decode GEMV is otherwise latency-bound on small k).
template <DType D, int M, int R, int U>
void gemv_rows(const float* x, const Weight2D& w, float* y, int64_t r0, int64_t r1) {
  const int64_t k = w.cols;
  const size_t es = dtype_size(D);
  constexpr int kStep = 8 * U;
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const uint8_t* rows[R];
    for (int i = 0; i < R; ++i) rows[i] = w.row(r + i);
    __m256 acc[R][M][U];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t)
        for (int u = 0; u < U; ++u) acc[i][t][u] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + kStep <= k; j += kStep) {
      for (int u = 0; u < U; ++u) {
        __m256 xv[M];
        for (int t = 0; t < M; ++t) xv[t] = _mm256_loadu_ps(x + t * k + j + 8 * u);
        for (int i = 0; i < R; ++i) {
          const __m256 wv = load8<D>(rows[i] + (j + 8 * u) * es);
          for (int t = 0; t < M; ++t) acc[i][t][u] = _mm256_fmadd_ps(wv, xv[t], acc[i][t][u]);
        }
      }
    }
    for (int i = 0; i < R; ++i) {
      for (int t = 0; t < M; ++t) {
        __m256 a = acc[i][t][0];
        for (int u = 1; u < U; ++u) a = _mm256_add_ps(a, acc[i][t][u]);
        float s = hsum(a);
        for (int64_t jj = j; jj < k; ++jj) s += load1<D>(rows[i] + jj * es) * x[t * k + jj];
        y[t * w.rows + r + i] = s;
      }
    }
  }
  if (r < r1) {
    if constexpr (R > 1) {
      gemv_rows<D, M, 1, U>(x, w, y, r, r1);
    }
  }
}

template <DType D>
void gemv_dispatch_m(const float* x, int64_t m, const Weight2D& w, float* y, int64_t r0, int64_t r1) {
  switch (m) {
    case 1: gemv_rows<D, 1, 4, 2>(x, w, y, r0, r1); break;
    case 2: gemv_rows<D, 2, 4, 1>(x, w, y, r0, r1); break;
    case 3: gemv_rows<D, 3, 2, 1>(x, w, y, r0, r1); break;
    case 4: gemv_rows<D, 4, 2, 1>(x, w, y, r0, r1); break;
    default: MOE_CHECK(false && "gemv supports m <= 4");
  }
}

void gemv_range(const float* x, int64_t m, const Weight2D& w, float* y, int64_t r0, int64_t r1) {
  switch (w.dtype) {
    case DType::kF32: gemv_dispatch_m<DType::kF32>(x, m, w, y, r0, r1); break;
    case DType::kBF16: gemv_dispatch_m<DType::kBF16>(x, m, w, y, r0, r1); break;
    case DType::kF16: gemv_dispatch_m<DType::kF16>(x, m, w, y, r0, r1); break;
  }
}

// Below this many weight bytes a matrix is done by one thread: the fork/join costs
// more than it saves.
constexpr size_t kParallelMinBytes = 96 * 1024;

}  // namespace

float dot_row(const float* x, const Weight2D& w, int64_t r) {
  float y = 0;
  Weight2D one = w;
  one.data = w.row(r);
  one.rows = 1;
  gemv_range(x, 1, one, &y, 0, 1);
  return y;
}

void linear_gemv(const float* x, int64_t m, const Weight2D& w, float* y) {
  MOE_CHECK(m >= 1 && m <= kGemvMaxTokens);
  const int threads = w.bytes() < kParallelMinBytes ? 1 : omp_get_max_threads();
  if (threads == 1) {
    gemv_range(x, m, w, y, 0, w.rows);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int nt = omp_get_num_threads();
    const int tid = omp_get_thread_num();
    // Contiguous row blocks, multiples of 8 rows, one per thread.
    const int64_t per = ((w.rows + nt - 1) / nt + 7) / 8 * 8;
    const int64_t r0 = std::min<int64_t>(w.rows, per * tid);
    const int64_t r1 = std::min<int64_t>(w.rows, r0 + per);
    if (r0 < r1) gemv_range(x, m, w, y, r0, r1);
  }
}

void linear_gemm(const float* x, int64_t m, const Weight2D& w, float* y) {
  const int64_t n = w.rows, k = w.cols;
  if (w.dtype == DType::kF32) {
    // Already f32: one sgemm, OpenBLAS threads it with OpenMP.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, x, static_cast<int>(k), static_cast<const float*>(w.data),
                static_cast<int>(k), 0.0f, y, static_cast<int>(n));
    return;
  }
  // Row blocks of W (~256 KiB of f32, so a block stays in L2) converted per thread.
  const int64_t block = std::max<int64_t>(16, std::min<int64_t>(n, (256 * 1024 / 4) / k / 16 * 16));
  const int64_t num_blocks = (n + block - 1) / block;
  const int threads = (w.bytes() < kParallelMinBytes && m < 64) ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(threads)
  {
    static thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>(block * k)) scratch.resize(static_cast<size_t>(block * k));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t r0 = b * block;
      const int64_t rows = std::min(block, n - r0);
      convert_to_f32(w.row(r0), w.dtype, scratch.data(), static_cast<size_t>(rows * k));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rows),
                  static_cast<int>(k), 1.0f, x, static_cast<int>(k), scratch.data(), static_cast<int>(k),
                  0.0f, y + r0, static_cast<int>(n));
    }
  }
}

void linear(const float* x, int64_t m, const Weight2D& w, float* y) {
  if (m <= 0) return;
  if (m <= kGemvMaxTokens) {
    linear_gemv(x, m, w, y);
  } else {
    linear_gemm(x, m, w, y);
  }
}

}  // namespace moe
