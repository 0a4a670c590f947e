#include "moe/ops/activation.h"

#include "moe/core/check.h"

namespace moe {

void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) {
  MOE_CHECK(gate.dtype() == DType::kF32 && up.dtype() == DType::kF32 && out.dtype() == DType::kF32);
  MOE_CHECK(gate.is_contiguous() && up.is_contiguous() && out.is_contiguous());
  MOE_CHECK(gate.ndim() == up.ndim() && gate.ndim() == out.ndim());
  for (int d = 0; d < gate.ndim(); ++d) MOE_CHECK(gate.dim(d) == up.dim(d) && gate.dim(d) == out.dim(d));
  MOE_CHECK(gate.device() == up.device() && gate.device() == out.device());
  switch (gate.device()) {
    case Device::kCpu:
      silu_mul(gate.data_as<const float>(), up.data_as<const float>(), gate.numel(), out.data_as<float>());
      return;
  }
  MOE_CHECK(false && "silu_mul: no kernel for this device");
}

void softmax(const TensorView& x) {
  MOE_CHECK(x.dtype() == DType::kF32 && x.ndim() == 2 && x.is_contiguous());
  switch (x.device()) {
    case Device::kCpu:
      for (int64_t r = 0; r < x.dim(0); ++r) softmax(x.row<float>(r), x.dim(1));
      return;
  }
  MOE_CHECK(false && "softmax: no kernel for this device");
}

}  // namespace moe
