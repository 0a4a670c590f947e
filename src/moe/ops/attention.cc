#include "moe/ops/attention.h"

#include "moe/core/check.h"

namespace moe {

void causal_attention(const TensorView& q, int64_t start_pos, const KvView& cache, const TensorView& out,
                      const KernelOptions& options) {
  const TensorView& k = cache.k;
  const TensorView& v = cache.v;
  MOE_CHECK(q.dtype() == DType::kF32 && out.dtype() == DType::kF32 && k.dtype() == v.dtype());
  MOE_CHECK(k.dtype() == DType::kF32 || k.dtype() == DType::kBF16 || k.dtype() == DType::kF16);
  MOE_CHECK(q.ndim() == 3 && out.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3);
  MOE_CHECK(q.is_contiguous() && out.is_contiguous() && k.is_contiguous() && v.is_contiguous());
  MOE_CHECK(out.dim(0) == q.dim(0) && out.dim(1) == q.dim(1) && out.dim(2) == q.dim(2));
  MOE_CHECK(k.dim(0) == v.dim(0) && k.dim(1) == v.dim(1) && k.dim(2) == v.dim(2));
  MOE_CHECK(k.dim(2) == q.dim(2) && k.dim(0) > 0 && q.dim(1) % k.dim(0) == 0);
  MOE_CHECK(start_pos >= 0 && start_pos + q.dim(0) <= k.dim(1));
  MOE_CHECK(q.device() == out.device() && k.device() == q.device() && v.device() == q.device());
  const AttentionShape shape{static_cast<int>(q.dim(1)), static_cast<int>(k.dim(0)), static_cast<int>(q.dim(2)),
                             k.dim(1)};
  switch (q.device()) {
    case Device::kCpu:
      cpu::causal_attention({q.data_as<const float>(), q.dim(0), start_pos, k.data(), v.data(), out.data_as<float>(),
                             k.dtype()},
                            shape, options);
      return;
  }
  MOE_CHECK(false && "causal_attention: no kernel for this device");
}

}  // namespace moe
