// Number formatting for error messages and reports: the one copy for the whole tree
// (placement, stats, serve and the CLI used to carry their own). Each function is one
// printf behaviour; pick by the output you need, the results are byte-for-byte stable.
// Thread-safe (no shared state); the C locale's decimal point is assumed.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace moe {

// printf(`format`, v) for a format with exactly one double conversion, e.g. "%.3gk".
// Results longer than 63 characters are cut.
inline std::string format_double(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// "%g": six significant digits, trailing zeros dropped (0.5, 1e+06, 1234.57, inf).
// For echoing a user's number back in a message.
inline std::string format_g(double v) { return format_double("%g", v); }

// "%.*f": `decimals` digits after the point (format_fixed(2.0 / 3, 3) == "0.667").
// For table columns. Results longer than 63 characters are cut.
inline std::string format_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// A float as Python's repr() prints it (vLLM's report lines): integral values below
// 1e15 with ".0" (40.0, -3.0), otherwise the shortest "%.{1..17}g" that reads back the
// same value (0.5, 1e-05, 0.1); "inf", "-inf" and "nan" as printf writes them.
inline std::string format_python_float(double v) {
  char buf[32];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.1f", v);
    return buf;
  }
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  for (int prec = 1; prec <= 17; ++prec) {
    char t[32];
    std::snprintf(t, sizeof(t), "%.*g", prec, v);
    if (std::strtod(t, nullptr) == v) return t;
  }
  return buf;  // nan: never equal to itself
}

}  // namespace moe
