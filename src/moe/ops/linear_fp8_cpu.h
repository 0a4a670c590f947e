// The FP8 (e4m3 + block scales) GEMV kernel behind linear() (ops/linear_cpu.h), for
// weights kept in FP8 in memory ("--fp8 native"): each weight is decoded in registers,
// multiplied by its block's scale (the same f32 product dequantize_rows_f32 forms) and
// accumulated in f32, so a decode step reads 1 byte per weight instead of bf16's 2.
//
//   job.x: [m, k] f32 (m <= kGemvMaxTokens), job.w: [n, k] kF8E4M3 with scales,
//   job.y: [m, n] f32; rows [r0, r1) of y are written.
// A token's sum runs in the same order whatever m is (each token has its own
// accumulators), so the result is batch invariant by construction and independent of
// the thread count. Prefill (large m) dequantises row blocks with dequantize_rows_f32
// and calls sgemm, as the bf16 path converts them.
#pragma once

#include <cstdint>

#include "moe/ops/linear_cpu.h"
#include "moe/tensor/weight.h"

namespace moe {

// AVX2 (x86-64-v3, the build's baseline): 8 weights per step.
void gemv_fp8_range(const LinearJob& job, int64_t r0, int64_t r1);

// Portable scalar version of the same sums (table decode, same order within 8-lane
// groups is not kept: results agree with gemv_fp8_range to rounding, not bit for bit).
void gemv_fp8_range_scalar(const LinearJob& job, int64_t r0, int64_t r1);

}  // namespace moe
