// AVX2 decoding of 8 float8_e4m3fn codes to f32 (for the kernels and convert_to_f32).
//
// Exact, and equal to kF8E4M3ToF32 for every code (tests/tensor/dtype_test.cc): the
// magnitude's bits move into an f32's exponent/mantissa (rebias 7 -> 127), the 8
// subnormal codes are converted as integers times 2^-9 (no reliance on f32 denormals,
// so DAZ/FTZ cannot change the result), 0x7f/0xff become NaN.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <limits>

namespace moe {

inline __m256 f8e4m3x8_to_f32(const uint8_t* p) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_and_si256(v, _mm256_set1_epi32(0x7f));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(1.0f / 512.0f));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag);
  const __m256i is_nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
  __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(is_sub));
  r = _mm256_blendv_ps(r, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), _mm256_castsi256_ps(is_nan));
  return _mm256_or_ps(r, _mm256_castsi256_ps(sign));
}

}  // namespace moe
