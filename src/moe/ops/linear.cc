#include "moe/ops/linear.h"

#include "moe/core/check.h"

namespace moe {

void linear(const TensorView& x, const Weight2D& w, const TensorView& y, const KernelOptions& options) {
  MOE_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32);
  MOE_CHECK(x.ndim() == 2 && y.ndim() == 2 && x.is_contiguous() && y.is_contiguous());
  MOE_CHECK(x.dim(0) == y.dim(0) && x.dim(1) == w.cols && y.dim(1) == w.rows);
  MOE_CHECK(x.device() == y.device());
  switch (x.device()) {
    case Device::kCpu:
      linear(x.data_as<const float>(), x.dim(0), w, y.data_as<float>(), options);
      return;
  }
  MOE_CHECK(false && "linear: no kernel for this device");
}

}  // namespace moe
