#include "moe/ops/norm.h"

#include "moe/core/check.h"
#include "moe/ops/norm_cpu.h"

namespace moe {

void rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& y) {
  MOE_CHECK(x.dtype() == DType::kF32 && weight.dtype() == DType::kF32 && y.dtype() == DType::kF32);
  MOE_CHECK(x.ndim() == 2 && y.ndim() == 2 && weight.ndim() == 1);
  MOE_CHECK(x.is_contiguous() && y.is_contiguous() && weight.is_contiguous());
  MOE_CHECK(x.dim(0) == y.dim(0) && x.dim(1) == y.dim(1) && weight.dim(0) == x.dim(1));
  MOE_CHECK(x.device() == y.device() && weight.device() == x.device());
  switch (x.device()) {
    case Device::kCpu:
      cpu::rms_norm(x.data_as<const float>(), weight.data_as<const float>(), cpu::NormShape{x.dim(0), x.dim(1)}, eps,
                    y.data_as<float>());
      return;
  }
  MOE_CHECK(false && "rms_norm: no kernel for this device");
}

}  // namespace moe
