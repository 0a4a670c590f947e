#include "moe/engine/json_decoding.h"

#include <vector>

#include "moe/constrain/json_schema_compiler.h"
#include "moe/core/logging.h"

namespace moe {

std::shared_ptr<const ConstraintVocab> ConstraintVocabCache::get(const Tokenizer& tokenizer, const ModelConfig& config) {
  std::call_once(once_, [&] {
    const int n = config.vocab_size;
    std::vector<std::string> bytes(static_cast<size_t>(n));
    std::vector<int> eos;
    for (int id = 0; id < n; ++id) {
      if (config.is_eos(id)) eos.push_back(id);
      if (!tokenizer.is_special(id)) bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
    }
    vocab_ = std::make_shared<const ConstraintVocab>(ConstraintVocab::build(bytes, std::move(eos)));
    MOE_LOG_INFO("constrained decoding: vocabulary of {} tokens as byte tries ({} and {} nodes)", n,
                 vocab_->all.nodes.size(), vocab_->non_plain.nodes.size());
  });
  return vocab_;
}

StatusOr<std::unique_ptr<JsonConstraint>> make_json_constraint(const std::string& response_format,
                                                               const std::string& json_schema,
                                                               ConstraintVocabCache& cache, const Tokenizer& tokenizer,
                                                               const ModelConfig& config) {
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<const JsonGrammar> grammar, compile_response_format(response_format, json_schema));
  if (!grammar) return std::unique_ptr<JsonConstraint>();
  return std::make_unique<JsonConstraint>(std::move(grammar), cache.get(tokenizer, config));
}

}  // namespace moe
