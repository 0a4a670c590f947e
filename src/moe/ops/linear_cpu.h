// The CPU kernels behind linear() (ops/linear.h), on raw pointers: for the tensor entry
// and for kernels that already hold row pointers (the MoE expert FFN, the SwiGLU MLP).
//
//   x: [m, k] f32 row-major (m tokens), W: [n, k] (Weight2D, stored dtype), y: [m, n] f32.
//
// Small m (decode, m <= kGemvMaxTokens) runs our GEMV kernel, which reads each weight
// row once for all m tokens and converts bf16/f16 in registers: decode is bound by
// weight bandwidth and no library offers bf16 GEMV on AVX2 (docs/history/single-stream.md).
// The kernel's instruction set is KernelOptions::isa (ops/kernel_isa.h: AVX2, AVX-512F,
// AVX512_BF16), chosen at run time; linear_kernels.h has the AVX-512 and int8 kernels.
// bf16 weights on AVX512_BF16 use vdpbf16ps (no conversion of the weights), int8 ones
// (kI8 with [1, 32] block scales, "--weights int8") quantise x to q8 per 32-block and
// use VNNI or AVX2 maddubs. Prefill stays on sgemm for every dtype (exact f32
// activations): a GEMM built from the vdpbf16ps GEMV in token tiles measured 0.35x of
// sgemm on Zen 4 (docs/history/single-stream.md). With KernelOptions::bf16_gemm, prefill on bf16
// weights rounds x to bf16 and runs oneDNN's bf16 matmul per row block instead
// (ops/linear_bf16_gemm.h; ~2x sgemm, activations at bf16 precision).
// Larger m (prefill) converts row blocks of W to f32 in a per-thread scratch and calls
// OpenBLAS sgemm on them, so bf16 weights are never copied whole to f32. FP8 weights
// (with block scales) take linear_fp8_cpu.h's GEMV, and the same sgemm path on row
// blocks dequantised with their scales. With
// KernelOptions::batch_invariant every m runs the GEMV kernel in groups of <= 4 tokens.
// Rows of W are split over OpenMP threads in fixed blocks; the result does not depend
// on the thread count. Call from outside any OpenMP parallel region.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/ops/kernel_options.h"
#include "moe/tensor/weight.h"

namespace moe {

inline constexpr int64_t kGemvMaxTokens = 4;

void linear(const float* x, int64_t m, const Weight2D& w, float* y, const KernelOptions& options);

// Several independent projections in one parallel region (e.g. q/k/v, or the w1/w3 of
// every active expert): their row blocks are shared out over the threads together,
// which costs one fork/join instead of one per matrix. Jobs must not overlap in `y`.
struct LinearJob {
  const float* x;      // [m, k]
  int64_t m;           // tokens (0 = skip)
  const Weight2D* w;   // [n, k]
  float* y;            // [m, n]
};
void linear_many(const LinearJob* jobs, size_t num_jobs, const KernelOptions& options);

// Explicit paths (exposed for tests and benchmarks): GEMV (m <= kGemvMaxTokens) and
// sgemm, whatever m is.
// linear_gemv takes options.isa (its batch_invariant is ignored: m <= 4 anyway);
// linear_gemm is OpenBLAS sgemm on dequantised row blocks, whatever the weights are.
void linear_gemv(const float* x, int64_t m, const Weight2D& w, float* y, const KernelOptions& options = {});
void linear_gemm(const float* x, int64_t m, const Weight2D& w, float* y);

// Dot product of f32 x[k] with row r of W, single-threaded, AVX2 (not for int8 weights).
float dot_row(const float* x, const Weight2D& w, int64_t r);

}  // namespace moe
