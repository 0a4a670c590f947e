// The per-instruction-set GEMV kernels behind linear_cpu.cc (not an API: linear() and
// linear_many() in ops/linear_cpu.h choose among them by KernelOptions::isa and dtype).
//
// Every kernel writes y[t, r] for rows [r0, r1) of w and all m tokens, with one fixed
// accumulation order per (row, token): a token's result depends neither on m (tokens
// are taken in groups of at most 4) nor on which rows share a pass, so the kernels are
// batch invariant by construction and independent of the thread split.
#pragma once

#include <cstdint>

#include "moe/ops/linear_cpu.h"
#include "moe/tensor/weight.h"

namespace moe {

// q8 blocks: 32 consecutive columns share one f32 scale (weights and quantised x).
inline constexpr int64_t kQ8Block = 32;

// One job with its activation prepared for the kernel that reads it.
struct GemvCall {
  LinearJob job;                    // x [m, k] f32, w [n, k], y [m, n]
  const uint16_t* x_hi = nullptr;   // [m, k] bf16(x) (split_bf16; AVX512_BF16 path)
  const uint16_t* x_lo = nullptr;   // [m, k] bf16(x - hi)
  const int8_t* x_q = nullptr;      // [m, k] q8 codes of x (quantize_q8_rows; int8 weights)
  const float* x_d = nullptr;       // [m, k / 32] their scales
};

// x = hi + lo in bf16 (round to nearest even, denormals to zero), n values.
void split_bf16(const float* x, int64_t n, uint16_t* hi, uint16_t* lo);

// Per 32-block of each row of x [m, k] (k % 32 == 0): d = max|x| / 127 and
// q = nearbyint(x * (1 / d)) (0 where d == 0), as llama.cpp's q8_0 does.
void quantize_q8_rows(const float* x, int64_t m, int64_t k, int8_t* q, float* d);

namespace avx512 {
// AVX-512F, f32/bf16/f16 weights (bf16/f16 converted in registers), f32 activations.
void gemv_range(const GemvCall& call, int64_t r0, int64_t r1);
// AVX512_BF16, bf16 weights: vdpbf16ps on x_hi and x_lo.
void gemv_bf16_dp_range(const GemvCall& call, int64_t r0, int64_t r1);
// AVX512_VNNI, kI8 weights with [1, 32] f32 scales: vpdpbusd on x_q.
void gemv_int8_range(const GemvCall& call, int64_t r0, int64_t r1);
}  // namespace avx512

// AVX2, kI8 weights: maddubs + madd; the same integer sums as the VNNI kernel, so the
// same bits.
void gemv_int8_avx2_range(const GemvCall& call, int64_t r0, int64_t r1);

}  // namespace moe
