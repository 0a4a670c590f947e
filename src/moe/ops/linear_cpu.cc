#include "moe/ops/linear_cpu.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "moe/core/check.h"
#include "moe/ops/blas_threads.h"
#include "moe/ops/linear_bf16_gemm.h"
#include "moe/ops/linear_fp8_cpu.h"
#include "moe/ops/linear_kernels.h"

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
    // Software prefetch of the next block of rows, one cache line per row per step
    // (kStep * es <= 64 bytes), when R > 1 rows are read side by side: R short streams
    // leave the hardware prefetcher behind. One row at a time (R = 1, the m = 1 decode
    // case) is one sequential stream, which the hardware prefetcher alone reads 1.5-1.75x
    // faster than R = 4 with this prefetch (docs/history/single-stream.md, "Decode reads").
    const uint8_t* next = (R > 1 && r + 2 * R <= r1) ? w.row(r + R) : nullptr;
    const size_t row_bytes = static_cast<size_t>(k) * es;
    int64_t j = 0;
    for (; j + kStep <= k; j += kStep) {
      if (next != nullptr && ((j * static_cast<int64_t>(es)) & 63) == 0) {
        for (int i = 0; i < R; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(next + i * row_bytes + j * es), _MM_HINT_T0);
        }
      }
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
    case 1: gemv_rows<D, 1, 1, 2>(x, w, y, r0, r1); break;
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
    case DType::kF8E4M3: gemv_fp8_range(LinearJob{x, m, &w, y}, r0, r1); break;
    case DType::kI8: MOE_CHECK(false && "int8 weights take the prepared-activation kernels"); break;
  }
}

// Batch-invariant GEMV (KernelOptions::batch_invariant): any m, in groups of at most 4 tokens, always two
// accumulators per row (U = 2, as the m = 1 decode kernel), so a token's result does not
// depend on m or on its group. R only changes how many weight rows share a pass.
template <DType D>
void gemv_invariant(const float* x, int64_t m, const Weight2D& w, float* y, int64_t r0, int64_t r1) {
  const int64_t k = w.cols, n = w.rows;
  for (int64_t t0 = 0; t0 < m; t0 += 4) {
    const float* xt = x + t0 * k;
    float* yt = y + t0 * n;
    switch (std::min<int64_t>(4, m - t0)) {
      case 1: gemv_rows<D, 1, 1, 2>(xt, w, yt, r0, r1); break;
      case 2: gemv_rows<D, 2, 2, 2>(xt, w, yt, r0, r1); break;
      case 3: gemv_rows<D, 3, 1, 2>(xt, w, yt, r0, r1); break;
      default: gemv_rows<D, 4, 1, 2>(xt, w, yt, r0, r1); break;
    }
  }
}

void gemv_invariant_range(const float* x, int64_t m, const Weight2D& w, float* y, int64_t r0, int64_t r1) {
  switch (w.dtype) {
    case DType::kF32: gemv_invariant<DType::kF32>(x, m, w, y, r0, r1); break;
    case DType::kBF16: gemv_invariant<DType::kBF16>(x, m, w, y, r0, r1); break;
    case DType::kF16: gemv_invariant<DType::kF16>(x, m, w, y, r0, r1); break;
    case DType::kF8E4M3:  // a token's sum does not depend on m (linear_fp8_cpu.h)
      for (int64_t t0 = 0; t0 < m; t0 += 4) {
        gemv_fp8_range(LinearJob{x + t0 * w.cols, std::min<int64_t>(4, m - t0), &w, y + t0 * w.rows}, r0, r1);
      }
      break;
    case DType::kI8: MOE_CHECK(false && "int8 weights take the prepared-activation kernels"); break;
  }
}

// Below this many weight bytes (summed over a call's jobs) the work is done by one
// thread: the fork/join costs more than it saves.
constexpr size_t kParallelMinBytes = 48 * 1024;
// GEMV work items cover this many rows.
constexpr int64_t kGemvBlockRows = 64;
// GEMM work items convert about this many bytes of f32 weights at a time: large enough
// that OpenBLAS's packing of x is amortised, small enough to stay in L3.
constexpr int64_t kGemmBlockBytes = 1 << 20;

// How one call runs: the caller's options, or sgemm for every job (linear_gemm).
struct Mode {
  bool invariant;
  bool force_gemm;
  KernelIsa isa;  // resolved (never kAuto)
  bool bf16_gemm = false;  // KernelOptions::bf16_gemm
};

bool use_gemv(int64_t m, Mode mode) { return !mode.force_gemm && (m <= kGemvMaxTokens || mode.invariant); }

// A GEMM job on bf16 weights in bf16_gemm mode: oneDNN on bf16-rounded x.
bool uses_bf16_gemm(const LinearJob& job, Mode mode) {
  return mode.bf16_gemm && !use_gemv(job.m, mode) && job.w->dtype == DType::kBF16;
}

// GEMV jobs whose kernel reads a prepared activation: int8 weights (q8 x), and bf16
// weights on AVX512_BF16 (x split in two bf16 parts); GEMM jobs in bf16_gemm mode (x_hi:
// x rounded to bf16). Prefill on sgemm needs none.
bool needs_prepared_x(const LinearJob& job, Mode mode) {
  if (uses_bf16_gemm(job, mode)) return true;  // x_hi = bf16(x)
  if (!use_gemv(job.m, mode)) return false;
  return job.w->dtype == DType::kI8 || (mode.isa == KernelIsa::kAvx512Bf16 && job.w->dtype == DType::kBF16);
}

int64_t block_rows(const LinearJob& job, Mode mode) {
  if (use_gemv(job.m, mode)) return kGemvBlockRows;
  if (uses_bf16_gemm(job, mode)) return std::max<int64_t>(16, kGemmBlockBytes / (2 * job.w->cols) / 16 * 16);
  const int64_t rows = kGemmBlockBytes / (4 * job.w->cols) / 16 * 16;
  return std::max<int64_t>(16, rows);
}

// One work item: rows [r0, r1) of one job.
void run_item(const GemvCall& call, int64_t r0, int64_t r1, Mode mode, std::vector<float>* scratch) {
  const LinearJob& job = call.job;
  const Weight2D& w = *job.w;
  if (use_gemv(job.m, mode)) {
    if (w.dtype == DType::kI8) {  // the int8 kernels are batch invariant (tokens in groups of 4)
      if (mode.isa != KernelIsa::kAvx2 && cpu_has_avx512_vnni()) {
        avx512::gemv_int8_range(call, r0, r1);
      } else {
        gemv_int8_avx2_range(call, r0, r1);
      }
    } else if (mode.isa == KernelIsa::kAvx512Bf16 && w.dtype == DType::kBF16) {
      avx512::gemv_bf16_dp_range(call, r0, r1);  // batch invariant too
    } else if (mode.isa != KernelIsa::kAvx2 && w.dtype != DType::kF8E4M3) {
      avx512::gemv_range(call, r0, r1);  // always batch invariant (tokens in groups of 4)
    } else if (mode.invariant) {
      gemv_invariant_range(job.x, job.m, w, job.y, r0, r1);
    } else {
      gemv_range(job.x, job.m, w, job.y, r0, r1);
    }
    return;
  }
  const int64_t k = w.cols, rows = r1 - r0;
  if (uses_bf16_gemm(job, mode)) {
    gemm_bf16_rows({call.x_hi, job.m, k, reinterpret_cast<const uint16_t*>(w.row(r0)), rows, job.y + r0, w.rows});
    return;
  }
  const float* wf;
  if (w.dtype == DType::kF32) {
    wf = reinterpret_cast<const float*>(w.row(r0));
  } else {
    if (scratch->size() < static_cast<size_t>(rows * k)) scratch->resize(static_cast<size_t>(rows * k));
    dequantize_rows_f32(w, r0, r1, scratch->data());  // bf16/f16 converted, fp8/int8 times its scales
    wf = scratch->data();
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(job.m), static_cast<int>(rows),
              static_cast<int>(k), 1.0f, job.x, static_cast<int>(k), wf, static_cast<int>(k), 0.0f, job.y + r0,
              static_cast<int>(w.rows));
}

// The jobs with their activations prepared for the GEMV kernels that need it (bf16 split or q8),
// in buffers reused per calling thread.
const GemvCall* prepare_calls(const LinearJob* jobs, size_t num_jobs, Mode mode) {
  static thread_local std::vector<GemvCall> calls;
  static thread_local std::vector<uint16_t> bf16;
  static thread_local std::vector<int8_t> q8;
  static thread_local std::vector<float> q8d;
  size_t n_bf16 = 0, n_q8 = 0;
  for (size_t j = 0; j < num_jobs; ++j) {
    const LinearJob& job = jobs[j];
    if (job.m <= 0 || !needs_prepared_x(job, mode)) continue;
    const size_t n = static_cast<size_t>(job.m * job.w->cols);
    if (job.w->dtype == DType::kI8) {
      n_q8 += n;
    } else {
      n_bf16 += 2 * n;
    }
  }
  if (bf16.size() < n_bf16) bf16.resize(n_bf16);
  if (q8.size() < n_q8) {
    q8.resize(n_q8);
    q8d.resize(n_q8 / kQ8Block + 1);
  }
  calls.assign(num_jobs, GemvCall{});
  size_t at_bf16 = 0, at_q8 = 0;
  for (size_t j = 0; j < num_jobs; ++j) {
    const LinearJob& job = jobs[j];
    GemvCall& c = calls[j];
    c.job = job;
    if (job.m <= 0 || !needs_prepared_x(job, mode)) continue;
    const int64_t k = job.w->cols;
    const size_t n = static_cast<size_t>(job.m * k);
    if (job.w->dtype == DType::kI8) {
      MOE_CHECK(k % kQ8Block == 0 && job.w->block_cols == kQ8Block);
      c.x_q = q8.data() + at_q8;
      c.x_d = q8d.data() + at_q8 / kQ8Block;
      quantize_q8_rows(job.x, job.m, k, q8.data() + at_q8, q8d.data() + at_q8 / kQ8Block);
      at_q8 += n;
    } else {
      c.x_hi = bf16.data() + at_bf16;
      c.x_lo = bf16.data() + at_bf16 + n;
      split_bf16(job.x, static_cast<int64_t>(n), bf16.data() + at_bf16, bf16.data() + at_bf16 + n);
      at_bf16 += 2 * n;
    }
  }
  return calls.data();
}

void linear_many_impl(const LinearJob* jobs, size_t num_jobs, Mode mode) {
  struct Item {
    uint32_t job;
    int64_t r0, r1;
  };
  // Small, reused per calling thread: no allocation in the steady state.
  static thread_local std::vector<Item> items;
  items.clear();
  size_t total_bytes = 0;
  int64_t max_m = 0;
  for (size_t j = 0; j < num_jobs; ++j) {
    const LinearJob& job = jobs[j];
    if (job.m <= 0) continue;
    total_bytes += job.w->bytes();
    max_m = std::max(max_m, job.m);
    const int64_t block = block_rows(job, mode);
    for (int64_t r0 = 0; r0 < job.w->rows; r0 += block) {
      items.push_back({static_cast<uint32_t>(j), r0, std::min(job.w->rows, r0 + block)});
    }
  }
  const GemvCall* calls = prepare_calls(jobs, num_jobs, mode);
  const int64_t n_items = static_cast<int64_t>(items.size());
  const bool parallel = n_items > 1 && omp_get_max_threads() > 1 &&
                        (total_bytes >= kParallelMinBytes || max_m * static_cast<int64_t>(total_bytes) >= (64 << 20));
  if (!parallel) {
    ScopedSerialBlas serial_blas;
    static thread_local std::vector<float> scratch;
    for (const Item& it : items) run_item(calls[it.job], it.r0, it.r1, mode, &scratch);
    return;
  }
  const Item* item_ptr = items.data();
#pragma omp parallel
  {
    static thread_local std::vector<float> scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_items; ++i) {
      const Item& it = item_ptr[i];
      run_item(calls[it.job], it.r0, it.r1, mode, &scratch);
    }
  }
}

}  // namespace

float dot_row(const float* x, const Weight2D& w, int64_t r) {
  MOE_CHECK(w.dtype != DType::kI8 && "dot_row: int8 weights need a prepared activation (use linear)");
  float y = 0;
  const Weight2D one = row_block(w, r, 1);  // an FP8 row keeps its block row of scales
  gemv_range(x, 1, one, &y, 0, 1);
  return y;
}

void linear_many(const LinearJob* jobs, size_t num_jobs, const KernelOptions& options) {
  linear_many_impl(jobs, num_jobs,
                   Mode{options.batch_invariant, false, resolve_kernel_isa(options.isa), options.bf16_gemm});
}

void linear(const float* x, int64_t m, const Weight2D& w, float* y, const KernelOptions& options) {
  const LinearJob job{x, m, &w, y};
  linear_many_impl(&job, 1, Mode{options.batch_invariant, false, resolve_kernel_isa(options.isa), options.bf16_gemm});
}

void linear_gemv(const float* x, int64_t m, const Weight2D& w, float* y, const KernelOptions& options) {
  MOE_CHECK(m >= 1 && m <= kGemvMaxTokens);
  const LinearJob job{x, m, &w, y};
  linear_many_impl(&job, 1, Mode{false, false, resolve_kernel_isa(options.isa)});
}

void linear_gemm(const float* x, int64_t m, const Weight2D& w, float* y) {
  const LinearJob job{x, m, &w, y};
  linear_many_impl(&job, 1, Mode{false, true, KernelIsa::kAvx2});
}

}  // namespace moe
