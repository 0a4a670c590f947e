#include "moe/engine/kernel_choice.h"

#include "moe/ops/linear_bf16_gemm.h"

namespace moe {
namespace {

std::string supported_list(IsaSupportFn supports = cpu_supports) {
  std::string s;
  for (KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512, KernelIsa::kAvx512Bf16}) {
    if (!supports(isa)) continue;
    if (!s.empty()) s += ", ";
    s += kernel_isa_name(isa);
  }
  return s;
}

}  // namespace

StatusOr<KernelChoice> choose_kernels(const EngineOptions& options) { return choose_kernels(options, cpu_supports); }

StatusOr<KernelChoice> choose_kernels(const EngineOptions& options, IsaSupportFn supports) {
  KernelChoice c;
  const std::optional<KernelIsa> isa = parse_kernel_isa(options.kernels);
  if (!isa) {
    return invalid_argument("kernels '" + options.kernels + "' is not one of auto, avx2, avx512, avx512-bf16");
  }
  if (!supports(*isa)) {
    return invalid_argument("kernels '" + options.kernels + "': this CPU does not support it (it supports: " +
                            supported_list(supports) + ")");
  }
  c.isa = *isa != KernelIsa::kAuto ? *isa
          : supports(KernelIsa::kAvx512Bf16) ? KernelIsa::kAvx512Bf16
          : supports(KernelIsa::kAvx512)     ? KernelIsa::kAvx512
                                             : KernelIsa::kAvx2;
  if (options.weights != "native" && options.weights != "int8") {
    return invalid_argument("weights '" + options.weights + "' is not one of native, int8");
  }
  c.int8_weights = options.weights == "int8";
  if (options.hugepages != "auto" && options.hugepages != "on" && options.hugepages != "off") {
    return invalid_argument("hugepages '" + options.hugepages + "' is not one of auto, on, off");
  }
  if (options.matmul_precision != "highest" && options.matmul_precision != "medium") {
    return invalid_argument("matmul_precision '" + options.matmul_precision + "' is not one of highest, medium");
  }
  c.bf16_gemm = options.matmul_precision == "medium";
  if (c.bf16_gemm) {
    const std::string medium = "matmul_precision 'medium' (bf16 prefill GEMM) ";
    if (!bf16_gemm_available()) {
      return Status(StatusCode::kFailedPrecondition,
                    medium + "needs oneDNN, and this build has none (it was configured with "
                             "-DMOE_WITH_ONEDNN=OFF): install libdnnl-dev and ocl-icd-opencl-dev and rebuild "
                             "with -DMOE_WITH_ONEDNN=ON, or use matmul_precision 'highest'");
    }
    if (c.isa != KernelIsa::kAvx512Bf16) {
      return invalid_argument(medium + "needs the avx512-bf16 kernels; kernels are " + kernel_isa_name(c.isa) +
                              " (cpu: " + supported_list(supports) + ")");
    }
    if (options.batch_invariant) {
      return invalid_argument(medium + "has no effect with batch_invariant kernels (they run no GEMM): turn "
                              "batch_invariant off, or use matmul_precision 'highest'");
    }
    if (c.int8_weights) {
      return invalid_argument(medium + "applies to bf16 weights; weights 'int8' has none (their prefill GEMM "
                              "dequantises to f32)");
    }
  }
  return c;
}

std::string describe_kernels(const KernelChoice& choice) {
  std::string s = std::string("kernels ") + kernel_isa_name(choice.isa) + " (cpu: " + supported_list();
  if (cpu_has_avx512_vnni()) s += ", vnni";
  s += std::string("; amx: ") + (cpu_has_amx() ? "present, no kernels yet" : "no") + "), weights " +
       (choice.int8_weights ? "int8" : "native") + (choice.bf16_gemm ? ", bf16 prefill GEMM (oneDNN)" : "");
  return s;
}

}  // namespace moe
