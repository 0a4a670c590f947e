#include "moe/ops/paged_attention.h"

#include "moe/core/check.h"

namespace moe {

void paged_causal_attention(const PagedAttentionSeq* seqs, size_t num_seqs, const KvView& pools, int num_heads) {
  const TensorView& k = pools.k;
  const TensorView& v = pools.v;
  MOE_CHECK(k.dtype() == v.dtype());
  MOE_CHECK(k.dtype() == DType::kF32 || k.dtype() == DType::kBF16 || k.dtype() == DType::kF16);
  MOE_CHECK(k.ndim() == 4 && v.ndim() == 4 && k.is_contiguous() && v.is_contiguous());
  for (int d = 0; d < 4; ++d) MOE_CHECK(k.dim(d) == v.dim(d));
  MOE_CHECK(k.dim(1) > 0 && num_heads % k.dim(1) == 0 && k.device() == v.device());
  const AttentionShape shape{num_heads, static_cast<int>(k.dim(1)), static_cast<int>(k.dim(3)), 0};
  switch (k.device()) {
    case Device::kCpu:
      cpu::paged_causal_attention(
          seqs, num_seqs, cpu::PagedPools{k.data(), v.data(), static_cast<int>(k.dim(2)), k.dtype()},
          shape);
      return;
  }
  MOE_CHECK(false && "paged_causal_attention: no kernel for this device");
}

}  // namespace moe
