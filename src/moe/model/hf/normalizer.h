// tokenizer.json "normalizer": NFC/NFKC/NFD/NFKD (utf8proc), Lowercase, Prepend, Replace
// (a literal String pattern) and Sequence. Internal to src/moe/model.
#pragma once

#include <memory>
#include <string>

#include "moe/model/hf/json_util.h"

namespace moe::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Valid UTF-8 in, valid UTF-8 out. Thread-safe.
  virtual std::string normalize(const std::string& text) const = 0;
};

// null JSON -> nullptr (no normalization). An unknown type is DataLoss naming
// `where`.type and the type.
StatusOr<std::unique_ptr<Normalizer>> parse_normalizer(const Json& j, const std::string& where);

}  // namespace moe::hf
