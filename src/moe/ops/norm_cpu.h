// The CPU kernel behind rms_norm() (ops/norm.h), on raw pointers.
#pragma once

#include <cstdint>

namespace moe::cpu {

struct NormShape {
  int64_t rows = 0;  // rows normalised independently
  int64_t n = 0;     // elements per row
};

// x, y: [rows, n] f32 (may alias); weight: [n] f32. Sums of squares in double.
void rms_norm(const float* x, const float* weight, NormShape shape, float eps, float* y);

}  // namespace moe::cpu
