// Streaming detokenization helpers shared by Engine::generate and the Scheduler.
// Internal to src/moe/engine.
#pragma once

#include <cstddef>
#include <string>

namespace moe {

// Bytes at the end of `s` that are U+FFFD from a partial byte-fallback character: held
// back while streaming until the character completes (0 or 3).
inline size_t unstable_suffix(const std::string& s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  if (s.size() >= 3 && s.compare(s.size() - 3, 3, kReplacement) == 0) return 3;
  return 0;
}

}  // namespace moe
