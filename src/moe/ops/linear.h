// y = x W^T, the projection of every Linear layer, for weights in f32/bf16/f16, or fp8
// e4m3 with block scales (Weight2D::scale; dequantised in the kernel, linear_fp8_cpu.h).
//
//   x: [m, k] f32, contiguous (m tokens); w: [n, k] (Weight2D, stored dtype, mapped from
//   the checkpoint); y: [m, n] f32, contiguous, overwritten (must not alias x).
//
// Validates shapes, dtypes and device once (MOE_CHECK: a mismatch is a programming
// error), then runs the device's kernel: ops/linear_cpu.{h,cc} (GEMV for decode, sgemm
// on converted row blocks for prefill; see there). A CUDA kernel would be
// ops/linear_cuda.cu, chosen here. Results do not depend on the thread count; with
// options.batch_invariant they do not depend on m either. Thread-safe for distinct y.
#pragma once

#include "moe/ops/kernel_options.h"
#include "moe/ops/linear_cpu.h"
#include "moe/tensor/tensor.h"
#include "moe/tensor/weight.h"

namespace moe {

void linear(const TensorView& x, const Weight2D& w, const TensorView& y, const KernelOptions& options);

}  // namespace moe
