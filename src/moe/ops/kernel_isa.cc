#include "moe/ops/kernel_isa.h"

#include <cpuid.h>

#include "moe/core/check.h"

namespace moe {
namespace {

struct Features {
  bool avx2_fma = false;
  bool avx512 = false;  // F, BW, VL, DQ, with the OS saving zmm/opmask state
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool amx = false;
};

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

Features probe() {
  Features f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
  if (!osxsave) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;  // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = (b >> 5) & 1;
  f.avx2_fma = avx2 && fma && ymm_state;
  const bool f512 = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
  f.avx512 = f.avx2_fma && zmm_state && f512 && dq && bw && vl;
  f.avx512_vnni = f.avx512 && ((c >> 11) & 1);
  const bool amx_tile = (d >> 24) & 1;
  f.amx = amx_tile && ((xcr0 >> 17) & 3) == 3;
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = f.avx512 && ((a1 >> 5) & 1);
  return f;
}

const Features& features() {
  static const Features f = probe();
  return f;
}

}  // namespace

const char* kernel_isa_name(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAuto: return "auto";
    case KernelIsa::kAvx2: return "avx2";
    case KernelIsa::kAvx512: return "avx512";
    case KernelIsa::kAvx512Bf16: return "avx512-bf16";
  }
  return "?";
}

std::optional<KernelIsa> parse_kernel_isa(std::string_view name) {
  for (KernelIsa isa : {KernelIsa::kAuto, KernelIsa::kAvx2, KernelIsa::kAvx512, KernelIsa::kAvx512Bf16}) {
    if (name == kernel_isa_name(isa)) return isa;
  }
  return std::nullopt;
}

bool cpu_supports(KernelIsa isa) {
  const Features& f = features();
  switch (isa) {
    case KernelIsa::kAuto: return true;
    case KernelIsa::kAvx2: return f.avx2_fma;
    case KernelIsa::kAvx512: return f.avx512;
    case KernelIsa::kAvx512Bf16: return f.avx512_bf16;
  }
  return false;
}

bool cpu_has_avx512_vnni() { return features().avx512_vnni; }
bool cpu_has_amx() { return features().amx; }

KernelIsa best_kernel_isa() {
  const Features& f = features();
  return f.avx512_bf16 ? KernelIsa::kAvx512Bf16 : f.avx512 ? KernelIsa::kAvx512 : KernelIsa::kAvx2;
}

KernelIsa resolve_kernel_isa(KernelIsa isa) {
  if (isa == KernelIsa::kAuto) return best_kernel_isa();
  MOE_CHECK(cpu_supports(isa) && "kernel path not supported by this CPU");
  return isa;
}

}  // namespace moe
