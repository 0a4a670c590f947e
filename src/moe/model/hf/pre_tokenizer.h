// tokenizer.json "pre_tokenizer": Split (a PCRE2 regex or a literal String, with
// behavior Removed/Isolated/MergedWithPrevious/MergedWithNext/Contiguous and invert),
// ByteLevel (add_prefix_space; use_regex = GPT-2's split regex; maps bytes to the
// byte-level alphabet), Digits (individual_digits) and Sequence. Internal to
// src/moe/model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moe/model/hf/json_util.h"

namespace moe::hf {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each piece of `pieces` further (and may rewrite it, as ByteLevel does).
  // Empty pieces are dropped. Thread-safe.
  virtual void apply(std::vector<std::string>* pieces) const = 0;
};

// null JSON -> nullptr. An unknown type, an unknown behavior, or a regex that PCRE2
// cannot compile (its message and offset) is DataLoss naming the field under `where`.
StatusOr<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const Json& j, const std::string& where);

}  // namespace moe::hf
