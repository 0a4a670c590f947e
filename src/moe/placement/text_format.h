// Number formatting shared by the placement code's error messages and reports.
// Internal to src/moe/placement.
#pragma once

#include <cstdio>
#include <string>

namespace moe::placement_detail {

inline std::string str(int v) { return std::to_string(v); }

// Shortest "%g" form of v (e.g. 0.5, 1e+06).
inline std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace moe::placement_detail
