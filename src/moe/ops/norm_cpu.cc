#include "moe/ops/norm_cpu.h"

#include <cmath>

namespace moe::cpu {

void rms_norm(const float* x, const float* weight, NormShape shape, float eps, float* y) {
  const int64_t m = shape.rows, n = shape.n;
  for (int64_t t = 0; t < m; ++t) {
    const float* xr = x + t * n;
    float* yr = y + t * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

}  // namespace moe::cpu
