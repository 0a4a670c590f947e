// float8_e4m3fn: the 256-entry table and the AVX2 decoder (convert_to_f32) against
// values computed here from the format's definition and hand-computed codes; the dtype
// name; Weight2D's block scales (bytes(), block_scale for f32/bf16 scales, unaligned)
// and dequantize_rows_f32 with partial edge blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "moe/tensor/dtype.h"
#include "moe/tensor/weight.h"

namespace moe {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// (-1)^s * 2^(e-7) * (1 + m/8), or 2^-6 * m/8 for e == 0; e=15,m=7 is NaN.
double expected_f8(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

TEST(Fp8Test, HandComputedCodes) {
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0xb8), -1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x3c), 1.5f);
  EXPECT_EQ(f8e4m3_to_f32(0x40), 2.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x77), 240.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);    // the largest finite value
  EXPECT_EQ(f8e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x08), 0.015625f);  // 2^-6, the smallest normal
  EXPECT_EQ(f8e4m3_to_f32(0x01), 0.001953125f);  // 2^-9, the smallest subnormal
  EXPECT_EQ(f8e4m3_to_f32(0x07), 7 * 0.001953125f);
  EXPECT_EQ(bits_of(f8e4m3_to_f32(0x00)), 0u);
  EXPECT_EQ(bits_of(f8e4m3_to_f32(0x80)), 0x80000000u);  // -0
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
}

TEST(Fp8Test, AllCodesTableAndVectorDecoderMatchDefinition) {
  std::vector<uint8_t> codes(256 + 3);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 37 % 256 + (i >= 256 ? 1 : 0));
  for (int c = 0; c < 256; ++c) codes[static_cast<size_t>(c)] = static_cast<uint8_t>(c);
  std::vector<float> out(codes.size());
  convert_to_f32(codes.data(), DType::kF8E4M3, out.data(), out.size());  // 8-wide + a scalar tail
  for (size_t i = 0; i < codes.size(); ++i) {
    const int c = codes[i];
    const double want = expected_f8(c);
    const float table = f8e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(table)) << c;
      EXPECT_TRUE(std::isnan(out[i])) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(table), want) << "code " << c;
    EXPECT_EQ(bits_of(out[i]), bits_of(table)) << "code " << c << " (signed zero included)";
  }
}

TEST(Fp8Test, DtypeName) {
  EXPECT_EQ(parse_dtype("F8_E4M3"), DType::kF8E4M3);
  EXPECT_STREQ(dtype_name(DType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_FALSE(parse_dtype("F8_E5M2").has_value());
}

// A 5 x 7 fp8 matrix with 2 x 3 blocks: scales [3, 3], the last block row and column
// partial. Weight (r, c) has code 0x38 + (r + c) % 8 (1 + ((r+c)%8)/8), scale of block
// (i, j) = 2^(i - j).
TEST(Fp8Test, WeightBytesScalesAndDequantize) {
  const int64_t rows = 5, cols = 7;
  std::vector<uint8_t> data(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) data[static_cast<size_t>(r * cols + c)] = static_cast<uint8_t>(0x38 + (r + c) % 8);
  // Scales stored one byte off alignment, as a mapped file may place them.
  std::vector<uint8_t> scale_buf(1 + 9 * 4);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const float s = std::ldexp(1.0f, i - j);
      std::memcpy(scale_buf.data() + 1 + (i * 3 + j) * 4, &s, 4);
    }
  Weight2D w{data.data(), DType::kF8E4M3, rows, cols, scale_buf.data() + 1, DType::kF32, 2, 3};
  EXPECT_EQ(w.scale_rows(), 3);
  EXPECT_EQ(w.scale_cols(), 3);
  EXPECT_EQ(w.data_bytes(), 35u);
  EXPECT_EQ(w.scale_bytes(), 36u);
  EXPECT_EQ(w.bytes(), 71u);
  EXPECT_EQ(w.block_scale(2, 0), 4.0f);
  EXPECT_EQ(w.block_scale(0, 2), 0.25f);
  std::vector<float> out(static_cast<size_t>(3 * cols));
  dequantize_rows_f32(w, 2, 5, out.data());
  for (int64_t r = 2; r < 5; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double want = (1.0 + ((r + c) % 8) / 8.0) * std::ldexp(1.0, static_cast<int>(r / 2 - c / 3));
      EXPECT_EQ(out[static_cast<size_t>((r - 2) * cols + c)], want) << r << "," << c;
    }

  // bf16 scales: the same values (powers of two are exact in bf16).
  std::vector<uint16_t> bf(9);
  for (int i = 0; i < 9; ++i) bf[static_cast<size_t>(i)] = f32_to_bf16(std::ldexp(1.0f, i / 3 - i % 3));
  Weight2D wb = w;
  wb.scale = bf.data();
  wb.scale_dtype = DType::kBF16;
  EXPECT_EQ(wb.scale_bytes(), 18u);
  std::vector<float> out_b(out.size());
  dequantize_rows_f32(wb, 2, 5, out_b.data());
  EXPECT_EQ(out_b, out);

  // Without scales: bytes() is the matrix alone.
  Weight2D plain{data.data(), DType::kBF16, 1, 4};
  EXPECT_EQ(plain.bytes(), 8u);
  EXPECT_EQ(plain.scale_bytes(), 0u);
}

}  // namespace
}  // namespace moe
