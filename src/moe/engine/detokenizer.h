// Streaming detokenization helpers shared by Engine::generate and the Scheduler
// (stop strings: the Scheduler).
// Internal to src/moe/engine.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace moe {

// Bytes at the end of `s` that are U+FFFD from a partial byte-fallback character: held
// back while streaming until the character completes (0 or 3).
inline size_t unstable_suffix(const std::string& s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  if (s.size() >= 3 && s.compare(s.size() - 3, 3, kReplacement) == 0) return 3;
  return 0;
}

// Longest suffix of `text` (from `from`) that is a proper prefix of a stop string: held
// back so that a stop string split over tokens is never half-sent.
inline size_t stop_prefix_holdback(const std::string& text, size_t from, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops) {
    for (size_t len = std::min(stop.size() - 1, text.size() - from); len > hold; --len) {
      if (text.compare(text.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

}  // namespace moe
