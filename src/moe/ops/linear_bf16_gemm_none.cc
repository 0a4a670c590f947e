// The bf16 prefill GEMM in a build without oneDNN (-DMOE_WITH_ONEDNN=OFF): unavailable.
// engine/kernel_choice refuses matmul_precision "medium" before anything could call it.
#include <cstdio>
#include <cstdlib>

#include "moe/ops/linear_bf16_gemm.h"

namespace moe {

bool bf16_gemm_available() { return false; }

void gemm_bf16_rows(const Bf16GemmArgs&) {
  std::fprintf(stderr, "gemm_bf16_rows: this build has no oneDNN (-DMOE_WITH_ONEDNN=OFF)\n");
  std::abort();
}

}  // namespace moe
