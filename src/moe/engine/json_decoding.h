// The engine's side of grammar-constrained decoding (SeqRequest::response_format,
// src/moe/constrain/): the vocabulary's byte tries, built from the tokenizer once per
// engine on first use, and a request's JsonConstraint. Internal to src/moe/engine.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "moe/constrain/json_constraint.h"
#include "moe/model/config.h"
#include "moe/model/tokenizer.h"
#include "moe/status.h"

namespace moe {

class ConstraintVocabCache {
 public:
  // Every id in [0, config.vocab_size) with its Tokenizer::token_bytes (special tokens
  // excluded), EOS = config.is_eos. Built on the first call; thread-safe.
  std::shared_ptr<const ConstraintVocab> get(const Tokenizer& tokenizer, const ModelConfig& config);

 private:
  std::once_flag once_;
  std::shared_ptr<const ConstraintVocab> vocab_;
};

// nullptr for response_format "text"; else a constraint at the start of the value.
// InvalidArgument naming response_format (compile_response_format).
StatusOr<std::unique_ptr<JsonConstraint>> make_json_constraint(const std::string& response_format,
                                                               const std::string& json_schema,
                                                               ConstraintVocabCache& cache, const Tokenizer& tokenizer,
                                                               const ModelConfig& config);

}  // namespace moe
