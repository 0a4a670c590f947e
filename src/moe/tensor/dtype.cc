#include "moe/tensor/dtype.h"

#include "moe/tensor/fp8_simd.h"

#include <immintrin.h>

#include <cmath>
#include <limits>
#include <utility>

namespace moe {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI8: return "I8";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  return std::nullopt;
}

namespace {

// Decodes one float8_e4m3fn code from its fields (the format's definition, not a bit trick).
constexpr float decode_f8e4m3(unsigned v) {
  const unsigned exp = (v >> 3) & 0xfu, mant = v & 7u;
  float mag = 0;
  if (exp == 0xfu && mant == 7u) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = static_cast<float>(mant) / 512.0f;  // subnormal: mant * 2^-9
  } else {
    mag = 1.0f + static_cast<float>(mant) / 8.0f;
    for (unsigned e = exp; e > 7; --e) mag *= 2.0f;
    for (unsigned e = exp; e < 7; ++e) mag /= 2.0f;
  }
  return (v & 0x80u) ? -mag : mag;
}

template <size_t... I>
constexpr std::array<float, 256> make_f8_table(std::index_sequence<I...>) {
  return {decode_f8e4m3(I)...};
}

}  // namespace

const std::array<float, 256> kF8E4M3ToF32 = make_f8_table(std::make_index_sequence<256>{});

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
    case DType::kF8E4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, f8e4m3x8_to_f32(s + i));
      for (; i < n; ++i) dst[i] = kF8E4M3ToF32[s[i]];
      return;
    }
    case DType::kI8: {
      const int8_t* s = static_cast<const int8_t*>(src);
      for (; i + 8 <= n; i += 8) {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)));
      }
      for (; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
  }
}

}  // namespace moe
