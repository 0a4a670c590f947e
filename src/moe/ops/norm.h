// RMSNorm (Zhang & Sennrich 2019), as HF LlamaRMSNorm/MixtralRMSNorm computes it in f32:
//   y = x * rsqrt(mean(x^2) + eps) * weight
#pragma once

#include "moe/tensor/tensor.h"

namespace moe {

// x, y: [rows, n] f32, contiguous (may alias); weight: [n] f32. Each row is normalised
// on its own (per-head q/k norms pass [num_tokens * num_heads, head_dim]). Shapes,
// dtypes and device are checked (MOE_CHECK), then the device's kernel runs
// (ops/norm_cpu.h).
void rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& y);

}  // namespace moe
