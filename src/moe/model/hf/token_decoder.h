// tokenizer.json "decoder": ByteLevel, ByteFallback, Fuse, Replace (String pattern),
// Strip, Metaspace and Sequence, applied to the tokens' strings as Hugging Face's
// decode_chain does. Internal to src/moe/model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moe/model/hf/json_util.h"

namespace moe::hf {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // Rewrites the token strings (the result may be fewer strings, e.g. ByteLevel joins
  // them). Strings may hold raw bytes that are not UTF-8. Thread-safe.
  virtual void decode_chain(std::vector<std::string>* tokens) const = 0;
};

// null JSON -> nullptr (tokens are concatenated as they are). An unknown type is
// DataLoss naming `where`.type.
StatusOr<std::unique_ptr<TokenDecoder>> parse_decoder(const Json& j, const std::string& where);

}  // namespace moe::hf
