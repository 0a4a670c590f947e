// Which instruction set the linear kernels use (ops/linear_cpu.h), chosen at run time
// from cpuid so that one binary (built for x86-64-v3) runs on every CPU it meets.
//
//   kAvx2        AVX2 + FMA + F16C: the build's baseline, always available.
//   kAvx512      AVX-512F/BW/VL/DQ: 16-wide f32 FMAs; bf16/f16 weights converted in registers.
//   kAvx512Bf16  kAvx512 plus AVX512_BF16 (`vdpbf16ps`) for bf16 weights: the f32
//                activation is split into two bf16 parts (x = hi + lo, |x - hi - lo| <=
//                2^-18 |x|) so that the products stay as precise as the f32 kernels'.
//   int8 weights use VNNI (`vpdpbusd`) whenever AVX512_VNNI is present (kAvx512 and up)
//   and AVX2's maddubs otherwise; both give the same integer sums, so the same bits.
// AMX (tile) kernels are not built: cpu_has_amx() reports whether the CPU has them.
//
// kAuto resolves to best_kernel_isa(), probed once (thread-safe). A path's results do
// not depend on the thread count; different paths agree to rounding, not bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace moe {

enum class KernelIsa : uint8_t { kAuto, kAvx2, kAvx512, kAvx512Bf16 };

// "auto", "avx2", "avx512", "avx512-bf16".
const char* kernel_isa_name(KernelIsa isa);
// The inverse of kernel_isa_name; nullopt for anything else.
std::optional<KernelIsa> parse_kernel_isa(std::string_view name);
// Whether this CPU (and OS: AVX-512 state enabled in XCR0) can run the path; kAuto: true.
bool cpu_supports(KernelIsa isa);
// Whether int8 kernels can use AVX512_VNNI here (with AVX-512VL).
bool cpu_has_avx512_vnni();
// Whether the CPU reports AMX tiles (AMX-BF16/INT8); no kernel uses them yet.
bool cpu_has_amx();
// The fastest supported path: kAvx512Bf16 > kAvx512 > kAvx2.
KernelIsa best_kernel_isa();
// isa, with kAuto replaced by best_kernel_isa(). An unsupported isa is a programming
// error (MOE_CHECK): callers validate user input with cpu_supports first.
KernelIsa resolve_kernel_isa(KernelIsa isa);

}  // namespace moe
