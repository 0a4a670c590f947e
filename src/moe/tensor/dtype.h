// Element types of weights and activations, and conversions to f32.
//
// Weights stay in their on-disk dtype (bf16/f16/f32, or fp8 e4m3 with block scales) in
// memory-mapped files; kernels read them directly and compute in f32. bf16 -> f32 is
// exact (shift into the high half); f32 -> bf16 rounds to nearest even (as PyTorch does).
// fp8 e4m3 is float8_e4m3fn (DeepSeek-V3's "F8_E4M3"): 1 sign, 4 exponent bits (bias 7),
// 3 mantissa bits, no infinities, 0x7f/0xff NaN, max 448; -> f32 is exact.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace moe {

// kF8E4M3 is only a weight dtype (Weight2D with block scales), never an activation.
// kI8 is a signed 8-bit weight code with per-block f32 scales (q8_0-like: blocks of
// [1, 32], model/int8_quant.h); it only arises from quantisation at load ("--weights
// int8"), never from a checkpoint file (parse_dtype does not accept it).
enum class DType : uint8_t { kF32, kBF16, kF16, kF8E4M3, kI8 };

// Bytes per element.
inline size_t dtype_size(DType dtype) {
  return dtype == DType::kF32 ? 4 : (dtype == DType::kF8E4M3 || dtype == DType::kI8) ? 1 : 2;
}
// Safetensors spelling: "F32", "BF16", "F16", "F8_E4M3" ("I8" for kI8).
const char* dtype_name(DType dtype);
// Parses a safetensors dtype string; nullopt for anything else (e.g. "I64", "F8_E5M2").
std::optional<DType> parse_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// float8_e4m3fn -> f32, exact for all 256 codes (a table; 0x7f/0xff give a quiet NaN).
extern const std::array<float, 256> kF8E4M3ToF32;
inline float f8e4m3_to_f32(uint8_t v) { return kF8E4M3ToF32[v]; }

// IEEE binary16 -> f32 (subnormals, inf, NaN handled).
float f16_to_f32(uint16_t v);
// f32 -> IEEE binary16, round to nearest even.
uint16_t f32_to_f16(float f);

// dst[i] = float(src[i]) for n elements of `dtype` (vectorised with AVX2/F16C). For
// kF8E4M3 and kI8 this is the raw code's value, without any block scale.
void convert_to_f32(const void* src, DType dtype, float* dst, size_t n);

}  // namespace moe
