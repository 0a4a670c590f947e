// EngineOptions::kernels and ::weights checked and applied: the linear
// kernels' instruction set, and int8 weights quantised at load (model/int8_quant.h).
#pragma once

#include <string>

#include "moe/engine_options.h"
#include "moe/ops/kernel_isa.h"
#include "moe/status.h"

namespace moe {

struct KernelChoice {
  KernelIsa isa = KernelIsa::kAvx2;  // resolved: never kAuto
  bool int8_weights = false;
  bool bf16_gemm = false;  // matmul_precision "medium" (KernelOptions::bf16_gemm)
};

// InvalidArgument naming the option and value for an unknown kernels/weights/hugepages/
// matmul_precision name, a kernel path this CPU lacks (listing the ones it has), or
// matmul_precision "medium" without the avx512-bf16 kernels, with batch_invariant or int8.
StatusOr<KernelChoice> choose_kernels(const EngineOptions& options);
// The same against another CPU's answers (tests: a CPU without AVX-512).
using IsaSupportFn = bool (*)(KernelIsa);
StatusOr<KernelChoice> choose_kernels(const EngineOptions& options, IsaSupportFn supports);

// One line for logs and `moe bench`: "kernels avx512-bf16 (cpu: avx2 avx512 avx512-bf16
// vnni; amx: no), weights int8".
std::string describe_kernels(const KernelChoice& choice);

}  // namespace moe
