#include "moe/engine/request_validation.h"

#include <cmath>

#include "moe/core/text_format.h"

namespace moe {

Status validate_sampling(const SamplingParams& sp) {
  if (!(sp.temperature >= 0.0f) || !std::isfinite(sp.temperature)) {
    return invalid_argument("temperature must be a finite number >= 0 (got " + format_g(sp.temperature) + ")");
  }
  if (!(sp.top_p > 0.0f && sp.top_p <= 1.0f)) {
    return invalid_argument("top_p must be in (0, 1] (got " + format_g(sp.top_p) + ")");
  }
  if (sp.top_k < 0) return invalid_argument("top_k must be >= 0 (got " + std::to_string(sp.top_k) + ")");
  return ok_status();
}

namespace {

Status validate_stop_strings(const std::vector<std::string>& stop) {
  if (stop.size() > static_cast<size_t>(kMaxStopStrings)) {
    return invalid_argument("at most " + std::to_string(kMaxStopStrings) + " stop strings (got " +
                            std::to_string(stop.size()) + ")");
  }
  for (const std::string& s : stop) {
    if (s.empty()) return invalid_argument("stop strings must not be empty");
  }
  return ok_status();
}

StatusOr<std::vector<int>> prompt_tokens(const RequestFields& request, const RequestLimits& limits) {
  std::vector<int> tokens;
  if (!request.prompt_token_ids.empty()) {
    tokens = request.prompt_token_ids;
  } else {
    if (request.prompt.empty()) return invalid_argument("prompt is empty");
    tokens = limits.tokenizer->encode(request.prompt);
  }
  const int vocab = limits.vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return invalid_argument("prompt token id " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return tokens;
}

}  // namespace

StatusOr<std::vector<int>> validate_request(const RequestFields& request, const RequestLimits& limits) {
  MOE_RETURN_IF_ERROR(validate_sampling(request.sampling));
  if (request.max_tokens < limits.min_max_tokens) {
    return invalid_argument("max_tokens must be >= " + std::to_string(limits.min_max_tokens) + " (got " +
                            std::to_string(request.max_tokens) + ")");
  }
  MOE_RETURN_IF_ERROR(validate_stop_strings(request.stop));
  MOE_ASSIGN_OR_RETURN(std::vector<int> tokens, prompt_tokens(request, limits));
  const int64_t prompt_len = static_cast<int64_t>(tokens.size());
  const int64_t needed = prompt_len + request.max_tokens;
  if (needed > limits.max_context) {
    // Worded as OpenAI's API words it (clients show it), with the sum spelled out.
    return invalid_argument("this model's maximum context length is " + std::to_string(limits.max_context) +
                            " tokens, but " + std::to_string(needed) + " were requested: prompt (" +
                            std::to_string(prompt_len) + " tokens) + max_tokens (" +
                            std::to_string(request.max_tokens) + ") exceeds the context of " +
                            std::to_string(limits.max_context) + " tokens");
  }
  return tokens;
}

}  // namespace moe
