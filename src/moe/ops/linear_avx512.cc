// The AVX-512 kernels of ops/linear_kernels.h. The build targets x86-64-v3 (AVX2), so
// every function here carries a target attribute instead of per-file flags: code that
// this file instantiates from headers (Weight2D, std::) is then still compiled for the
// baseline, and only these functions use AVX-512. linear_cpu.cc calls them only after
// cpu_supports() said yes (ops/kernel_isa.h).
#include <immintrin.h>

// GCC 12's _mm512_reduce_add_ps reads an _mm256_undefined_pd() it then overwrites,
// which -Wmaybe-uninitialized reports at every use (a false positive).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cstdint>

#include "moe/core/check.h"
#include "moe/ops/linear_kernels.h"

#define MOE_AVX512F __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define MOE_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
#define MOE_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace moe {
namespace {

// 16 weights of dtype D at p (lanes outside `mask` are 0).
template <DType D>
MOE_AVX512F inline __m512 load_w16(const uint8_t* p, __mmask16 mask) {
  if constexpr (D == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, p);
  } else if constexpr (D == DType::kBF16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
  }
}

// Rows [r0, r1), M tokens, R rows per pass, two accumulators per (row, token) that take
// alternate 16-column steps; the tail (k % 32) in masked steps continuing the alternation.
template <DType D, int M, int R>
MOE_AVX512F void gemv16_rows(const float* x, const Weight2D& w, float* y, int64_t r0, int64_t r1) {
  const int64_t k = w.cols;
  constexpr int64_t es = D == DType::kF32 ? 4 : 2;
  const size_t row_bytes = static_cast<size_t>(k * es);
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const uint8_t* rows[R];
    for (int i = 0; i < R; ++i) rows[i] = w.row(r + i);
    __m512 acc[R][M][2];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t) acc[i][t][0] = acc[i][t][1] = _mm512_setzero_ps();
    const uint8_t* next = (R > 1 && r + 2 * R <= r1) ? w.row(r + R) : nullptr;
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
      if (next != nullptr) {
        for (int i = 0; i < R; ++i)
          for (int64_t b = 0; b < 32 * es; b += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(next + i * row_bytes + j * es + b), _MM_HINT_T0);
          }
      }
      for (int u = 0; u < 2; ++u) {
        __m512 xv[M];
        for (int t = 0; t < M; ++t) xv[t] = _mm512_loadu_ps(x + t * k + j + 16 * u);
        for (int i = 0; i < R; ++i) {
          const __m512 wv = load_w16<D>(rows[i] + (j + 16 * u) * es, 0xffff);
          for (int t = 0; t < M; ++t) acc[i][t][u] = _mm512_fmadd_ps(wv, xv[t], acc[i][t][u]);
        }
      }
    }
    for (int u = 0; j < k; j += 16, u ^= 1) {
      const int64_t left = k - j;
      const __mmask16 mask = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
      __m512 xv[M];
      for (int t = 0; t < M; ++t) xv[t] = _mm512_maskz_loadu_ps(mask, x + t * k + j);
      for (int i = 0; i < R; ++i) {
        const __m512 wv = load_w16<D>(rows[i] + j * es, mask);
        for (int t = 0; t < M; ++t) acc[i][t][u] = _mm512_fmadd_ps(wv, xv[t], acc[i][t][u]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t) y[t * w.rows + r + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][t][0], acc[i][t][1]));
  }
  if constexpr (R > 1) {
    if (r < r1) gemv16_rows<D, M, 1>(x, w, y, r, r1);
  }
}

template <DType D>
MOE_AVX512F void gemv16_tokens(const GemvCall& c, int64_t r0, int64_t r1) {
  const Weight2D& w = *c.job.w;
  const int64_t k = w.cols, n = w.rows;
  for (int64_t t0 = 0; t0 < c.job.m; t0 += 4) {
    const float* x = c.job.x + t0 * k;
    float* y = c.job.y + t0 * n;
    switch (std::min<int64_t>(4, c.job.m - t0)) {
      case 1: gemv16_rows<D, 1, 1>(x, w, y, r0, r1); break;
      case 2: gemv16_rows<D, 2, 4>(x, w, y, r0, r1); break;
      case 3: gemv16_rows<D, 3, 2>(x, w, y, r0, r1); break;
      default: gemv16_rows<D, 4, 2>(x, w, y, r0, r1); break;
    }
  }
}

// bf16 weights with vdpbf16ps: per (row, token) one accumulator on x_hi and one on x_lo,
// 32 columns (one 64-byte line of a row) per step; the tail in one masked step.
template <int M, int R>
MOE_AVX512BF16 void gemv_dp_rows(const uint16_t* xh, const uint16_t* xl, const Weight2D& w, float* y, int64_t r0,
                                 int64_t r1) {
  const int64_t k = w.cols;
  const size_t row_bytes = static_cast<size_t>(k * 2);
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const uint16_t* rows[R];
    for (int i = 0; i < R; ++i) rows[i] = reinterpret_cast<const uint16_t*>(w.row(r + i));
    __m512 hi[R][M], lo[R][M];
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t) hi[i][t] = lo[i][t] = _mm512_setzero_ps();
    const uint8_t* next = (R > 1 && r + 2 * R <= r1) ? w.row(r + R) : nullptr;
    int64_t j = 0;
    auto step = [&](__mmask32 mask) MOE_AVX512BF16 {
      __m512bh xa[M], xb[M];
      for (int t = 0; t < M; ++t) {
        xa[t] = (__m512bh)_mm512_maskz_loadu_epi16(mask, xh + t * k + j);
        xb[t] = (__m512bh)_mm512_maskz_loadu_epi16(mask, xl + t * k + j);
      }
      for (int i = 0; i < R; ++i) {
        const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, rows[i] + j);
        for (int t = 0; t < M; ++t) {
          hi[i][t] = _mm512_dpbf16_ps(hi[i][t], wv, xa[t]);
          lo[i][t] = _mm512_dpbf16_ps(lo[i][t], wv, xb[t]);
        }
      }
    };
    for (; j + 32 <= k; j += 32) {
      if (next != nullptr) {
        for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(next + i * row_bytes + j * 2), _MM_HINT_T0);
      }
      step(static_cast<__mmask32>(0xffffffffu));
    }
    if (j < k) step(static_cast<__mmask32>((1u << (k - j)) - 1));
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t) y[t * w.rows + r + i] = _mm512_reduce_add_ps(_mm512_add_ps(hi[i][t], lo[i][t]));
  }
  if constexpr (R > 1) {
    if (r < r1) gemv_dp_rows<M, 1>(xh, xl, w, y, r, r1);
  }
}

// One 32-block of gemv_q8_rows: acc[i][t] += (exact integer dot product of row i's codes
// and token t's, by vpdpbusd on |w| and x carrying w's sign) * scale[i][t]. A function with
// the target attribute, not a lambda: clang gives a lambda none of its caller's targets.
template <int R>
struct Q8Rows {
  const int8_t* const* rows;  // R row pointers
  const int8_t* xq;           // token 0's codes; token t's at xq + t * k
  int64_t k;
  const int8_t* next;  // the next R rows, prefetched; or nullptr
};

template <int M, int R>
MOE_AVX512VNNI inline __attribute__((always_inline)) void q8_block(const Q8Rows<R>& q, int64_t b,
                                                                 const __m256 (&scale)[R][M], __m256 (&acc)[R][M]) {
  if (q.next != nullptr && (b & 1) == 0) {
    for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(q.next + i * q.k + b * kQ8Block), _MM_HINT_T0);
  }
  __m256i xv[M];
  for (int t = 0; t < M; ++t) xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.xq + t * q.k + b * kQ8Block));
  for (int i = 0; i < R; ++i) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.rows[i] + b * kQ8Block));
    const __m256i aw = _mm256_sign_epi8(wv, wv);
    for (int t = 0; t < M; ++t) {
      const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(xv[t], wv));
      acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale[i][t], acc[i][t]);
    }
  }
}

// int8 weights, q8 activations: per 32-block the exact integer dot product (vpdpbusd
// on |w| and x carrying w's sign), times d_w * d_x, accumulated in f32.
template <int M, int R>
MOE_AVX512VNNI void gemv_q8_rows(const GemvCall& c, int64_t t0, int64_t r0, int64_t r1) {
  const Weight2D& w = *c.job.w;
  const int64_t k = w.cols, nb = k / kQ8Block;
  const int8_t* xq = c.x_q + t0 * k;
  const float* xd = c.x_d + t0 * nb;
  float* y = c.job.y + t0 * w.rows;
  const float* scales = static_cast<const float*>(w.scale);
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
    // The scale products d_w * d_x: 8 blocks' in one vector multiply, each block taking its
    // lane; the tail's as scalars (the same bits either way).
    __m256 scale[R][M];
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      __m256 sc[R][M];
      for (int i = 0; i < R; ++i)
        for (int t = 0; t < M; ++t) sc[i][t] = _mm256_mul_ps(_mm256_loadu_ps(ds[i] + b), _mm256_loadu_ps(xd + t * nb + b));
      for (int j = 0; j < 8; ++j) {
        const __m256i lane = _mm256_set1_epi32(j);
        for (int i = 0; i < R; ++i)
          for (int t = 0; t < M; ++t) scale[i][t] = _mm256_permutevar8x32_ps(sc[i][t], lane);
        q8_block<M, R>({rows, xq, k, next}, b + j, scale, acc);
      }
    }
    for (; b < nb; ++b) {
      for (int i = 0; i < R; ++i)
        for (int t = 0; t < M; ++t) scale[i][t] = _mm256_set1_ps(ds[i][b] * xd[t * nb + b]);
      q8_block<M, R>({rows, xq, k, next}, b, scale, acc);
    }
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < M; ++t) {
        const __m256 v = acc[i][t];
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        y[t * w.rows + r + i] = _mm_cvtss_f32(s);
      }
  }
  if constexpr (R > 1) {
    if (r < r1) gemv_q8_rows<M, 1>(c, t0, r, r1);
  }
}

}  // namespace

namespace avx512 {

MOE_AVX512F void gemv_range(const GemvCall& call, int64_t r0, int64_t r1) {
  switch (call.job.w->dtype) {
    case DType::kF32: gemv16_tokens<DType::kF32>(call, r0, r1); return;
    case DType::kBF16: gemv16_tokens<DType::kBF16>(call, r0, r1); return;
    case DType::kF16: gemv16_tokens<DType::kF16>(call, r0, r1); return;
    default: MOE_CHECK(false && "avx512 gemv: f32, bf16 or f16 weights only");
  }
}

MOE_AVX512BF16 void gemv_bf16_dp_range(const GemvCall& call, int64_t r0, int64_t r1) {
  const Weight2D& w = *call.job.w;
  MOE_CHECK(w.dtype == DType::kBF16 && call.x_hi != nullptr && call.x_lo != nullptr);
  const int64_t k = w.cols, n = w.rows;
  for (int64_t t0 = 0; t0 < call.job.m; t0 += 4) {
    const uint16_t* xh = call.x_hi + t0 * k;
    const uint16_t* xl = call.x_lo + t0 * k;
    float* y = call.job.y + t0 * n;
    switch (std::min<int64_t>(4, call.job.m - t0)) {
      case 1: gemv_dp_rows<1, 1>(xh, xl, w, y, r0, r1); break;
      case 2: gemv_dp_rows<2, 4>(xh, xl, w, y, r0, r1); break;
      case 3: gemv_dp_rows<3, 2>(xh, xl, w, y, r0, r1); break;
      default: gemv_dp_rows<4, 2>(xh, xl, w, y, r0, r1); break;
    }
  }
}

MOE_AVX512VNNI void gemv_int8_range(const GemvCall& call, int64_t r0, int64_t r1) {
  for (int64_t t0 = 0; t0 < call.job.m; t0 += 4) {
    switch (std::min<int64_t>(4, call.job.m - t0)) {
      case 1: gemv_q8_rows<1, 1>(call, t0, r0, r1); break;
      case 2: gemv_q8_rows<2, 4>(call, t0, r0, r1); break;
      case 3: gemv_q8_rows<3, 2>(call, t0, r0, r1); break;
      default: gemv_q8_rows<4, 2>(call, t0, r0, r1); break;
    }
  }
}

}  // namespace avx512

MOE_AVX512BF16 static void split_bf16_avx512(const float* x, int64_t n, uint16_t* hi, uint16_t* lo) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + i);
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    const __m512 hv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    __m512 d = _mm512_sub_ps(v, hv);
    d = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, d, _CMP_ORD_Q), d);  // x = +-inf: lo = 0, not NaN
    const __m256i l = (__m256i)_mm512_cvtneps_pbh(d);
    _mm256_mask_storeu_epi16(hi + i, mask, h);
    _mm256_mask_storeu_epi16(lo + i, mask, l);
  }
}

void split_bf16(const float* x, int64_t n, uint16_t* hi, uint16_t* lo) {
  MOE_CHECK(cpu_supports(KernelIsa::kAvx512Bf16));
  split_bf16_avx512(x, n, hi, lo);
}

}  // namespace moe
