// find_non_finite (the AVX2 kernel of this build) and find_non_finite_portable (64-bit
// words) on hand-written bit patterns of each dtype: a NaN or an Inf found at an
// unaligned element of an unaligned buffer and at the tail; finite values (zeros, the
// largest finite of each sign, the smallest and largest subnormals) accepted; the two
// kernels agree at every position; copy_finding_non_finite finds the same while copying.
#include "moe/model/finite_scan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace moe {
namespace {

struct Patterns {
  DType dtype;
  std::vector<uint32_t> finite;  // bit patterns, each a finite value
  std::vector<uint32_t> nan;
  std::vector<uint32_t> inf;     // empty: the dtype has no Inf
};

std::vector<Patterns> all_patterns() {
  return {
      // F32: max finite 0x7F7FFFFF (3.4028235e38), subnormals 0x00000001 .. 0x007FFFFF.
      {DType::kF32,
       {0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x007FFFFF, 0x807FFFFF,
        0x00800000},
       {0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF},
       {0x7F800000, 0xFF800000}},
      // BF16: max finite 0x7F7F, subnormals 0x0001 .. 0x007F.
      {DType::kBF16,
       {0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F, 0x0001, 0x007F, 0x807F, 0x0080},
       {0x7FC0, 0xFFC0, 0x7F81, 0x7FFF},
       {0x7F80, 0xFF80}},
      // F16: max finite 0x7BFF (65504), subnormals 0x0001 .. 0x03FF.
      {DType::kF16,
       {0x0000, 0x8000, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x0001, 0x03FF, 0x83FF, 0x0400},
       {0x7E00, 0xFE00, 0x7C01, 0x7FFF},
       {0x7C00, 0xFC00}},
      // F8_E4M3 (fn): max finite 0x7E (448), subnormals 0x01 .. 0x07; NaN S.1111.111 only.
      {DType::kF8E4M3, {0x00, 0x80, 0x38, 0xB8, 0x7E, 0xFE, 0x01, 0x07, 0x87, 0x08, 0x78, 0x7D}, {0x7F, 0xFF}, {}},
  };
}

// `count` elements cycling through the finite patterns, at byte offset 1 of the
// returned buffer (so no element is aligned), with `bad` at element `at` (if >= 0).
std::vector<uint8_t> make_buffer(const Patterns& p, size_t count, int64_t at, uint32_t bad) {
  const size_t size = dtype_size(p.dtype);
  std::vector<uint8_t> buf(1 + count * size + 1, 0xAB);  // a byte of slack at each end
  for (size_t i = 0; i < count; ++i) {
    const uint32_t v = i == static_cast<size_t>(at) ? bad : p.finite[i % p.finite.size()];
    std::memcpy(buf.data() + 1 + i * size, &v, size);  // little-endian: the low bytes
  }
  return buf;
}

int64_t scan(const std::vector<uint8_t>& buf, size_t count, DType dtype, bool portable) {
  return portable ? find_non_finite_portable(buf.data() + 1, count, dtype)
                  : find_non_finite(buf.data() + 1, count, dtype);
}

TEST(FiniteScanTest, ThisBuildScansWithAvx2) {
#if defined(__AVX2__)
  EXPECT_TRUE(finite_scan_is_avx2());
#else
  EXPECT_FALSE(finite_scan_is_avx2());
#endif
}

TEST(FiniteScanTest, FiniteValuesPass) {
  for (const Patterns& p : all_patterns()) {
    for (bool portable : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(p.dtype)) + (portable ? " portable" : " fast"));
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{131}, size_t{4099}}) {
        const auto buf = make_buffer(p, count, -1, 0);
        EXPECT_EQ(scan(buf, count, p.dtype, portable), -1) << count << " elements";
      }
    }
  }
}

TEST(FiniteScanTest, NanAndInfFoundAtAnUnalignedElementAndAtTheTail) {
  const size_t count = 4099;  // no multiple of any vector width
  for (const Patterns& p : all_patterns()) {
    std::vector<std::pair<uint32_t, const char*>> bad;
    for (uint32_t v : p.nan) bad.push_back({v, "NaN"});
    for (uint32_t v : p.inf) bad.push_back({v, "Inf"});
    for (const auto& [bits, kind] : bad) {
      for (bool portable : {false, true}) {
        for (int64_t at : {int64_t{0}, int64_t{37}, int64_t{2053}, static_cast<int64_t>(count - 1)}) {
          SCOPED_TRACE(std::string(dtype_name(p.dtype)) + (portable ? " portable" : " fast") + " bits " +
                       std::to_string(bits) + " at " + std::to_string(at));
          const auto buf = make_buffer(p, count, at, bits);
          EXPECT_EQ(scan(buf, count, p.dtype, portable), at);
          EXPECT_STREQ(non_finite_kind(buf.data() + 1, at, p.dtype), kind);
          // Left out of the count, the tail element is not looked at.
          if (at == static_cast<int64_t>(count - 1)) {
            EXPECT_EQ(scan(buf, count - 1, p.dtype, portable), -1);
          }
        }
      }
    }
  }
}

TEST(FiniteScanTest, TheFirstOfTwoIsReported) {
  for (const Patterns& p : all_patterns()) {
    auto buf = make_buffer(p, 300, 250, p.nan[0]);
    const size_t size = dtype_size(p.dtype);
    std::memcpy(buf.data() + 1 + 90 * size, &p.nan[0], size);
    EXPECT_EQ(scan(buf, 300, p.dtype, false), 90) << dtype_name(p.dtype);
    EXPECT_EQ(scan(buf, 300, p.dtype, true), 90) << dtype_name(p.dtype);
  }
}

TEST(FiniteScanTest, KernelsAgreeAtEveryPosition) {
  for (const Patterns& p : all_patterns()) {
    for (size_t count = 1; count <= 200; ++count) {
      for (int64_t at : {int64_t{-1}, static_cast<int64_t>(count / 2), static_cast<int64_t>(count - 1)}) {
        const auto buf = make_buffer(p, count, at, p.nan.back());
        ASSERT_EQ(scan(buf, count, p.dtype, false), scan(buf, count, p.dtype, true))
            << dtype_name(p.dtype) << " count " << count << " at " << at;
        ASSERT_EQ(scan(buf, count, p.dtype, false), at);
      }
    }
  }
}

// copy_finding_non_finite: the same answers, and the bytes copied exactly, to an aligned
// destination (the AVX2 streaming path) and a misaligned one, over sizes around its
// 4 KiB check window, with the bad element early, at a window's edge and at the tail.
TEST(FiniteScanTest, CopyFindsWhatTheScanFindsAndCopiesEverything) {
  for (const Patterns& p : all_patterns()) {
    const size_t size = dtype_size(p.dtype);
    for (size_t count : {size_t{1}, size_t{100}, 4096 / size, 4096 / size + 3, 3 * 4096 / size + 17}) {
      for (int64_t at : {int64_t{-1}, int64_t{0}, static_cast<int64_t>(4096 / size) - 1, static_cast<int64_t>(count) - 1}) {
        if (at >= static_cast<int64_t>(count)) continue;
        const auto src = make_buffer(p, count, at, p.inf.empty() ? p.nan[0] : p.inf[0]);
        for (bool portable : {false, true}) {
          for (size_t misalign : {size_t{0}, size_t{1}}) {
            SCOPED_TRACE(std::string(dtype_name(p.dtype)) + (portable ? " portable" : " fast") + " count " +
                         std::to_string(count) + " at " + std::to_string(at) + " misalign " + std::to_string(misalign));
            std::vector<uint8_t> dst_buf(count * size + 64 + 1, 0);
            uint8_t* dst = dst_buf.data() + (64 - reinterpret_cast<uintptr_t>(dst_buf.data()) % 64) % 64 + misalign;
            const int64_t got = portable ? copy_finding_non_finite_portable(dst, src.data() + 1, count, p.dtype)
                                         : copy_finding_non_finite(dst, src.data() + 1, count, p.dtype);
            EXPECT_EQ(got, at);
            EXPECT_EQ(0, std::memcmp(dst, src.data() + 1, count * size));
          }
        }
      }
    }
  }
}

TEST(FiniteScanTest, Int8HasNothingToCheck) {
  const std::vector<uint8_t> all_ones(100, 0xFF);
  EXPECT_EQ(find_non_finite(all_ones.data(), all_ones.size(), DType::kI8), -1);
  EXPECT_EQ(find_non_finite_portable(all_ones.data(), all_ones.size(), DType::kI8), -1);
  std::vector<uint8_t> copy(100, 0);
  EXPECT_EQ(copy_finding_non_finite(copy.data(), all_ones.data(), all_ones.size(), DType::kI8), -1);
  EXPECT_EQ(copy, all_ones);
}

}  // namespace
}  // namespace moe
