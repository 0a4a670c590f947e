// The CPU kernels behind the activation entries (ops/activation.h), on raw pointers:
// also called directly by kernels that hold row pointers (the expert FFN, the router,
// attention's inner loop).
#pragma once

#include <cstdint>

namespace moe {

// SwiGLU gate (Shazeer 2020): out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x).
// out may alias gate or up.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// In-place softmax over n values, computed with the max subtracted (sum in double).
void softmax(float* x, int64_t n);

}  // namespace moe
