// The NaN/Inf scan of weight bytes (weight_checks.h, and the huge-page copy of
// weights_relocate.h): an element is non-finite when its exponent bits are all ones,
// F32 0x7F800000, BF16 0x7F80, F16 0x7C00; F8_E4M3 has no Inf and one NaN per sign,
// S.1111.111 (0x7F / 0xFF). AVX2 compares 32 bytes of words at a time (the build's
// baseline is x86-64-v3); elsewhere 64-bit words, all lanes at once (SWAR).
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/tensor/dtype.h"

namespace moe {

// Index of the first non-finite element among `count` elements of `dtype` at `data`
// (any alignment), or -1. Always -1 for kI8 (no exponent). Thread-safe.
int64_t find_non_finite(const void* data, size_t count, DType dtype);

// The same answer from the portable 64-bit-word kernel alone (what builds without AVX2
// run; tests compare the two).
int64_t find_non_finite_portable(const void* data, size_t count, DType dtype);

// Copies `count` elements from `src` to `dst` (not overlapping; any alignment) and
// returns find_non_finite's answer for them: the bytes are read once. With AVX2 and `dst`
// 32-byte aligned (an arena's), streaming stores (the destination is not read first nor
// kept in the caches). Everything is copied whatever is found.
int64_t copy_finding_non_finite(void* dst, const void* src, size_t count, DType dtype);

// The same with the portable kernel (blocks scanned, then copied with memcpy).
int64_t copy_finding_non_finite_portable(void* dst, const void* src, size_t count, DType dtype);

// Whether find_non_finite and copy_finding_non_finite run AVX2 kernels in this build.
bool finite_scan_is_avx2();

// "Inf" or "NaN" for element `index` of `data` (a non-finite one: mantissa zero = Inf;
// F8_E4M3: always "NaN").
const char* non_finite_kind(const void* data, int64_t index, DType dtype);

}  // namespace moe
