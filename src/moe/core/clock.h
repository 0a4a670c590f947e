// Wall-clock helpers for timing (seconds as double, monotonic).
#pragma once

#include <chrono>

namespace moe {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace moe
