#include "moe/tensor/dtype.h"

#include <immintrin.h>

#include <cmath>

namespace moe {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
    if (sign) out = -out;
    return out;
  }
  uint32_t bits;
  if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

uint16_t f32_to_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

void convert_to_f32(const void* src, DType dtype, float* dst, size_t n) {
  size_t i = 0;
  switch (dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
        __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
      }
      for (; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
      }
      for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
  }
}

}  // namespace moe
