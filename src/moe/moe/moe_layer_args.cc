#include "moe/moe/moe_layer_args.h"

#include "moe/core/check.h"

namespace moe {

void check_moe_layer_args(const MoeLayerArgs& args) {
  const TensorView& x = args.x;
  const TensorView& out = args.out;
  MOE_CHECK(x.dtype() == DType::kF32 && x.device() == Device::kCpu && x.ndim() == 2 && x.is_contiguous());
  MOE_CHECK(out.dtype() == DType::kF32 && out.device() == Device::kCpu && out.ndim() == 2 && out.is_contiguous());
  MOE_CHECK(x.dim(1) == args.config.hidden_size && out.dim(1) == args.config.hidden_size);
  MOE_CHECK(out.dim(0) == x.dim(0));
}

}  // namespace moe
