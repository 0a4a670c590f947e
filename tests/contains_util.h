// EXPECT_CONTAINS(text, needle): checks that an error message names something, and
// prints both strings when it does not (GoogleTest only; the tests do not link gmock).
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace moe::testing {

inline ::testing::AssertionResult ContainsFormat(const char* text_expr, const char* needle_expr,
                                                 const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << text_expr << " does not contain " << needle_expr << "\n  text:   \""
                                       << text << "\"\n  needle: \"" << needle << "\"";
}

}  // namespace moe::testing

#define EXPECT_CONTAINS(text, needle) EXPECT_PRED_FORMAT2(::moe::testing::ContainsFormat, text, needle)
#define ASSERT_CONTAINS(text, needle) ASSERT_PRED_FORMAT2(::moe::testing::ContainsFormat, text, needle)
