// A compiled PCRE2 regex (UTF + Unicode properties, JIT when available), as the
// tokenizer.json Split pre-tokenizer uses it. Internal to src/moe/model.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moe/status.h"

namespace moe::hf {

class Regex {
 public:
  // InvalidArgument with PCRE2's message and the offset of the error in `pattern`.
  static StatusOr<std::unique_ptr<Regex>> compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The non-empty matches of the pattern in `text`, left to right, as [begin, end) byte
  // offsets. Thread-safe.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  Regex() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe::hf
