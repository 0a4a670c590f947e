// Activations: the SwiGLU gate and softmax. Entries take tensor views, check them
// (MOE_CHECK) and run the device's kernel (ops/activation_cpu.{h,cc}, which also keeps
// the raw-pointer forms for kernels).
#pragma once

#include "moe/ops/activation_cpu.h"
#include "moe/tensor/tensor.h"

namespace moe {

// out = silu(gate) * up elementwise. gate, up, out: same shape, f32, contiguous; out may
// alias gate or up.
void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out);

// Softmax of each row, in place. x: [rows, n] f32, contiguous.
void softmax(const TensorView& x);

}  // namespace moe
