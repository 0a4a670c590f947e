// Prefill GEMM on bf16 weights with bf16-rounded activations (KernelOptions::
// bf16_gemm, `--matmul-precision medium`): oneDNN's matmul (Debian libdnnl, its
// AVX-512 BF16 brgemm kernels: vdpbf16ps, two multiply-adds per f32 lane), f32
// accumulation and output. Not an API: linear_cpu.cc calls it per row block of w, and
// engine/kernel_choice asks bf16_gemm_available().
#pragma once

#include <cstdint>

namespace moe {

// y[t, r] = sum_c x[t, c] * w[r, c] for t < m, r < rows, over c < k.
struct Bf16GemmArgs {
  const uint16_t* x;  // [m, k] bf16 (the activations rounded to nearest even), row stride k
  int64_t m, k;
  const uint16_t* w;  // [rows, k] bf16, row stride k (a row block of a Weight2D)
  int64_t rows;
  float* y;           // [m, rows] f32, row stride ldy (>= rows), overwritten
  int64_t ldy;
};

// Runs on the calling thread only (OpenMP threads 1 while it runs), so a row's result
// depends on m, k and the block's rows, never on the thread count. One primitive per
// (k, rows, ldy) and thread, created at first use, with m a run-time dimension. Aborts with oneDNN's message if it
// refuses the shape or the CPU (callers check cpu_supports(KernelIsa::kAvx512Bf16)).
void gemm_bf16_rows(const Bf16GemmArgs& a);

// Whether this build has the GEMM: false when configured with -DMOE_WITH_ONEDNN=OFF
// (linear_bf16_gemm_none.cc, whose gemm_bf16_rows aborts). engine/kernel_choice refuses
// matmul_precision "medium" by name when it is false. Thread-safe.
bool bf16_gemm_available();

}  // namespace moe
