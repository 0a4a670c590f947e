// dtype conversions against hand-computed bit patterns: bf16 <-> f32 (exact widening,
// round-to-nearest-even narrowing, NaN kept NaN), f16 -> f32 (normals, subnormals,
// inf, NaN), the vectorised convert_to_f32 for every dtype and odd lengths, and the
// safetensors dtype names/sizes.
#include "moe/tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace moe {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// ---- bf16 -> f32 -------------------------------------------------------------------

TEST(Bf16Test, ToF32ExactValues) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xBF80), -1.0f);
  EXPECT_EQ(bf16_to_f32(0x4000), 2.0f);
  EXPECT_EQ(bf16_to_f32(0xC020), -2.5f);
  EXPECT_EQ(bf16_to_f32(0x3F00), 0.5f);
  EXPECT_EQ(bf16_to_f32(0x3F81), 1.0f + 1.0f / 128.0f);  // lowest mantissa bit = 2^-7
  EXPECT_EQ(bf16_to_f32(0x0000), 0.0f);
  EXPECT_EQ(bits_of(bf16_to_f32(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_EQ(bf16_to_f32(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16_to_f32(0xFF80), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7FC0)));
  // Smallest bf16 subnormal: 2^-133.
  EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));
}

// ---- f32 -> bf16 -------------------------------------------------------------------

TEST(Bf16Test, FromF32ExactValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-1.0f), 0xBF80);
  EXPECT_EQ(f32_to_bf16(-2.5f), 0xC020);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(Bf16Test, FromF32RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between 0x3F80 (1.0) and 0x3F81 (1 + 2^-7): ties to
  // the even mantissa, 0x3F80.
  const float half_up = 1.0f + std::ldexp(1.0f, -8);
  ASSERT_EQ(bits_of(half_up), 0x3F808000u);
  EXPECT_EQ(f32_to_bf16(half_up), 0x3F80);
  // 1 + 3*2^-9 = 1 + 2^-8 + 2^-9 is above halfway: rounds up to 0x3F81.
  const float above = 1.0f + 3.0f * std::ldexp(1.0f, -9);
  ASSERT_EQ(bits_of(above), 0x3F80C000u);
  EXPECT_EQ(f32_to_bf16(above), 0x3F81);
  // 1 + 2^-9 is below halfway: rounds down.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -9)), 0x3F80);
  // 1 + 2^-7 + 2^-8 is halfway between 0x3F81 (odd) and 0x3F82: ties to even, up.
  EXPECT_EQ(f32_to_bf16(float_of(0x3F818000u)), 0x3F82);
  // Just above the tie (one f32 ulp) always rounds up.
  EXPECT_EQ(f32_to_bf16(float_of(0x3F808001u)), 0x3F81);
  // Same ties on a negative value: -(1 + 2^-8) -> -1, -(1 + 3*2^-9) -> 0xBF81.
  EXPECT_EQ(f32_to_bf16(-half_up), 0xBF80);
  EXPECT_EQ(f32_to_bf16(-above), 0xBF81);
  // Rounding can carry into the exponent: the largest f32 below 2 rounds to 2.
  EXPECT_EQ(f32_to_bf16(float_of(0x3FFFFFFFu)), 0x4000);
  // And the largest finite f32 overflows to +inf (as PyTorch does).
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
}

TEST(Bf16Test, NaNStaysNaN) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(qnan))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(-qnan))));
  // A NaN whose payload sits only in the low 16 bits: plain truncation or rounding
  // would turn it into inf (0x7F80) or, via the carry, into something else.
  const float low_payload_nan = float_of(0x7F800001u);
  ASSERT_TRUE(std::isnan(low_payload_nan));
  const uint16_t b = f32_to_bf16(low_payload_nan);
  EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << b;
  // All-ones NaN must not carry into the sign / wrap around.
  const float ones_nan = float_of(0x7FFFFFFFu);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(ones_nan))));
  EXPECT_EQ(f32_to_bf16(ones_nan) & 0x8000, 0);  // sign preserved (positive)
}

TEST(Bf16Test, RoundTripOfBf16ValuesIsExact) {
  // Every finite bf16 value survives bf16 -> f32 -> bf16 unchanged.
  for (uint32_t v = 0; v <= 0xFFFF; ++v) {
    const uint16_t h = static_cast<uint16_t>(v);
    const float f = bf16_to_f32(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << v;
  }
}

TEST(Bf16Test, NarrowingMatchesNaiveNearestEven) {
  // Independent reference: pick the nearer of the two bracketing bf16 values in double,
  // ties to even mantissa.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = dist(rng);
    const uint32_t b = bits_of(f);
    const uint16_t lo = static_cast<uint16_t>(b >> 16);  // truncation, toward zero
    const uint16_t hi = static_cast<uint16_t>(lo + 1);   // next magnitude up
    const double dlo = std::fabs(static_cast<double>(f) - bf16_to_f32(lo));
    const double dhi = std::fabs(static_cast<double>(f) - bf16_to_f32(hi));
    uint16_t expected;
    if (dlo < dhi) expected = lo;
    else if (dhi < dlo) expected = hi;
    else expected = (lo & 1) ? hi : lo;
    ASSERT_EQ(f32_to_bf16(f), expected) << f;
  }
}

// ---- f16 -> f32 --------------------------------------------------------------------

TEST(F16Test, ToF32Normals) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xBC00), -1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0xC100), -2.5f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);  // 0x155 = 341: (1 + 341/1024) / 4
  EXPECT_EQ(f16_to_f32(0x3C01), 1.0f + 1.0f / 1024.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);  // largest finite
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
}

TEST(F16Test, ToF32SubnormalsAndZero) {
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0002), std::ldexp(1.0f, -23));
  EXPECT_EQ(f16_to_f32(0x0200), std::ldexp(1.0f, -15));
  EXPECT_EQ(f16_to_f32(0x03FF), 1023.0f * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(bits_of(f16_to_f32(0x0000)), 0x00000000u);
  EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);  // -0
}

TEST(F16Test, ToF32InfAndNaN) {
  EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));  // signalling-pattern NaN, still NaN
  EXPECT_TRUE(std::isnan(f16_to_f32(0xFE00)));
}

// Independent f16 decoder: sign * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024.
double naive_f16(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v;
  if (e == 0) v = std::ldexp(static_cast<double>(m) / 1024.0, -14);
  else if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(1.0 + static_cast<double>(m) / 1024.0, e - 15);
  return sign ? -v : v;
}

TEST(F16Test, AllValuesMatchNaiveDecoder) {
  for (uint32_t v = 0; v <= 0xFFFF; ++v) {
    const uint16_t h = static_cast<uint16_t>(v);
    const double want = naive_f16(h);
    const float got = f16_to_f32(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << v;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << v;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << v;
    }
  }
}

TEST(F16Test, FromF32RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.5f), 0xC100);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);         // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f * std::ldexp(1.0f, -12)), 0x3C01);  // above tie
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);               // subnormal
  EXPECT_EQ(f32_to_f16(70000.0f), 0x7C00);                            // overflow -> inf
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

// ---- convert_to_f32 ----------------------------------------------------------------

class ConvertTest : public ::testing::TestWithParam<size_t> {};

// The vectorised path handles 8 at a time; the tail goes through the scalar path. The
// output must equal the scalar conversion bit for bit and nothing past n is written.
TEST_P(ConvertTest, AllDTypesMatchScalar) {
  const size_t n = GetParam();
  constexpr float kSentinel = -12345.0f;
  std::mt19937 rng(static_cast<uint32_t>(n));

  // f32: a copy.
  {
    std::vector<float> src(n);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    for (auto& v : src) v = dist(rng);
    std::vector<float> dst(n + 9, kSentinel);
    convert_to_f32(src.data(), DType::kF32, dst.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits_of(dst[i]), bits_of(src[i])) << "f32 i=" << i;
    for (size_t i = n; i < dst.size(); ++i) ASSERT_EQ(dst[i], kSentinel) << "f32 wrote past n at " << i;
  }
  // bf16 and f16: random bit patterns (including subnormals, inf, NaN) -- except that
  // NaNs are compared by isnan only.
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<uint16_t> src(n);
    std::uniform_int_distribution<uint32_t> bits(0, 0xFFFF);
    for (auto& v : src) v = static_cast<uint16_t>(bits(rng));
    // Make sure the interesting f16 values are in the vector part when n >= 8.
    if (dt == DType::kF16 && n >= 6) {
      src[0] = 0x0001;  // 2^-24
      src[1] = 0x7C00;  // inf
      src[2] = 0x83FF;  // negative subnormal
      src[3] = 0x3C00;  // 1
      src[4] = 0xC100;  // -2.5
      src[5] = 0x7E00;  // NaN
    }
    if (dt == DType::kBF16 && n >= 3) {
      src[0] = 0x3F80;
      src[1] = 0xC020;
      src[2] = 0x7F80;
    }
    std::vector<float> dst(n + 9, kSentinel);
    convert_to_f32(src.data(), dt, dst.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const double want = dt == DType::kF16 ? naive_f16(src[i])
                                            : static_cast<double>(float_of(static_cast<uint32_t>(src[i]) << 16));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(dst[i])) << "i=" << i;
      } else {
        ASSERT_EQ(static_cast<double>(dst[i]), want) << "i=" << i << " bits=" << std::hex << src[i];
        ASSERT_EQ(std::signbit(dst[i]), std::signbit(want)) << "i=" << i;
      }
    }
    for (size_t i = n; i < dst.size(); ++i) ASSERT_EQ(dst[i], kSentinel) << "wrote past n at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, ConvertTest, ::testing::Values(0, 1, 3, 7, 8, 9, 13, 15, 16, 17, 31, 64, 67));

TEST(ConvertTest, HandValuesF16) {
  const uint16_t src[11] = {0x3C00, 0xC000, 0x0001, 0x7C00, 0xFC00, 0x0400, 0x7BFF, 0x8000, 0x3800, 0x4248, 0x03FF};
  float dst[11];
  convert_to_f32(src, DType::kF16, dst, 11);
  EXPECT_EQ(dst[0], 1.0f);
  EXPECT_EQ(dst[1], -2.0f);
  EXPECT_EQ(dst[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(dst[3], std::numeric_limits<float>::infinity());
  EXPECT_EQ(dst[4], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(dst[5], std::ldexp(1.0f, -14));
  EXPECT_EQ(dst[6], 65504.0f);
  EXPECT_EQ(bits_of(dst[7]), 0x80000000u);
  EXPECT_EQ(dst[8], 0.5f);
  EXPECT_EQ(dst[9], 3.140625f);  // 0x4248: 2 * (1 + 0x248/1024)
  EXPECT_EQ(dst[10], 1023.0f * std::ldexp(1.0f, -24));
}

TEST(ConvertTest, HandValuesBf16) {
  const uint16_t src[10] = {0x3F80, 0xC020, 0x4000, 0x0000, 0x8000, 0x7F80, 0x3F81, 0x4049, 0xBF00, 0x4120};
  float dst[10];
  convert_to_f32(src, DType::kBF16, dst, 10);
  EXPECT_EQ(dst[0], 1.0f);
  EXPECT_EQ(dst[1], -2.5f);
  EXPECT_EQ(dst[2], 2.0f);
  EXPECT_EQ(dst[3], 0.0f);
  EXPECT_EQ(bits_of(dst[4]), 0x80000000u);
  EXPECT_EQ(dst[5], std::numeric_limits<float>::infinity());
  EXPECT_EQ(dst[6], 1.0078125f);
  EXPECT_EQ(dst[7], 3.140625f);
  EXPECT_EQ(dst[8], -0.5f);
  EXPECT_EQ(dst[9], 10.0f);
}

// ---- names and sizes ---------------------------------------------------------------

TEST(DTypeTest, Sizes) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
}

TEST(DTypeTest, ParseAndName) {
  EXPECT_EQ(parse_dtype("F32"), DType::kF32);
  EXPECT_EQ(parse_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("F16"), DType::kF16);
  EXPECT_EQ(parse_dtype("F8_E4M3"), DType::kF8E4M3);
  for (const char* bad : {"I64", "F64", "F8_E5M2", "f32", "bf16", "", "F32 ", "BOOL"}) {
    EXPECT_FALSE(parse_dtype(bad).has_value()) << "'" << bad << "'";
  }
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}) {
    EXPECT_EQ(parse_dtype(dtype_name(dt)), dt);
  }
  EXPECT_STREQ(dtype_name(DType::kBF16), "BF16");
}

}  // namespace
}  // namespace moe
