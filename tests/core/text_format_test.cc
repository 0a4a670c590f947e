// The shared number formatting helpers: each keeps the exact output of the copies it
// replaced (placement messages, heatmap labels, CLI tables, vLLM-style report lines).
#include "moe/core/text_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace moe {
namespace {

TEST(TextFormatTest, FormatG) {
  EXPECT_EQ(format_g(0.5), "0.5");
  EXPECT_EQ(format_g(1e6), "1e+06");
  EXPECT_EQ(format_g(1234.5678), "1234.57");
  EXPECT_EQ(format_g(-2), "-2");
  EXPECT_EQ(format_g(0), "0");
  EXPECT_EQ(format_g(1e-5), "1e-05");
  EXPECT_EQ(format_g(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_g(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(format_g(std::nan("")), "nan");
}

TEST(TextFormatTest, FormatFixed) {
  EXPECT_EQ(format_fixed(2.0 / 3, 3), "0.667");
  EXPECT_EQ(format_fixed(1.0, 2), "1.00");
  EXPECT_EQ(format_fixed(12.5, 1), "12.5");
  EXPECT_EQ(format_fixed(0.0005, 3), "0.001");  // round half to even on the binary value
  EXPECT_EQ(format_fixed(-1.25, 0), "-1");
  EXPECT_EQ(format_fixed(0.001, 6), "0.001000");
}

TEST(TextFormatTest, FormatDouble) {
  EXPECT_EQ(format_double("%.3gk", 147.25), "147k");
  EXPECT_EQ(format_double("%.0f", 1234.0), "1234");
  EXPECT_EQ(format_double("%.3f", 0.125), "0.125");
  EXPECT_EQ(format_double("%.2f", 0.515), "0.52");
}

TEST(TextFormatTest, FormatPythonFloat) {
  EXPECT_EQ(format_python_float(40), "40.0");
  EXPECT_EQ(format_python_float(-3), "-3.0");
  EXPECT_EQ(format_python_float(0.5), "0.5");
  EXPECT_EQ(format_python_float(0.1), "0.1");
  EXPECT_EQ(format_python_float(1e-5), "1e-05");
  EXPECT_EQ(format_python_float(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(format_python_float(1e15), "1e+15");  // integral, but not below 1e15
  EXPECT_EQ(format_python_float(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_python_float(std::nan("")), "nan");
}

}  // namespace
}  // namespace moe
