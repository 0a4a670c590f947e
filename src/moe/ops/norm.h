// RMSNorm (Zhang & Sennrich 2019), as HF LlamaRMSNorm/MixtralRMSNorm computes it in f32:
//   y = x * rsqrt(mean(x^2) + eps) * weight
#pragma once

#include <cstdint>

namespace moe {

// x, y: [m, n] f32 (may alias); weight: [n] f32.
void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y);

}  // namespace moe
