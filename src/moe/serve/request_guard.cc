#include "moe/serve/request_guard.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace moe::serve {

size_t longest_token_bytes(const GenerationService& service, int vocab_size) {
  size_t longest = 0;
  for (int id = 0; id < vocab_size; ++id) longest = std::max(longest, service.token_bytes(id).size());
  return longest;
}

size_t prompt_byte_bound(int context, size_t longest_token) {
  if (context <= 0 || longest_token == 0) return 0;
  return static_cast<size_t>(context) * longest_token * 2 + 1024;
}

namespace {

bool starts_with(const std::string& s, std::string_view prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

bool is_context_length_error(const std::string& message) {
  // request_validation.cc (prompt + max_tokens over the context) and the Scheduler
  // (more than the whole KV cache).
  return starts_with(message, "this model's maximum context length") ||
         (starts_with(message, "the request needs ") && message.find("KV cache") != std::string::npos);
}

std::string param_of_engine_error(const std::string& message, Endpoint endpoint) {
  const std::string prompt = endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
  if (is_context_length_error(message) || starts_with(message, "prompt ")) return prompt;
  if (starts_with(message, "at most ") && message.find("stop strings") != std::string::npos) return "stop";
  if (starts_with(message, "stop strings ")) return "stop";
  // "<field> must ...", "<field> for token ...", "<field> token id ...", "<field>[i] = ...".
  static constexpr std::array<std::string_view, 13> kFields = {
      "temperature",       "top_p",          "top_k",     "min_p",          "presence_penalty",
      "frequency_penalty", "repetition_penalty", "logit_bias", "prompt_logprobs", "logprobs",
      "max_tokens",        "stop_token_ids", "seed"};
  for (std::string_view f : kFields) {
    if (!starts_with(message, f) || message.size() == f.size()) continue;
    const char next = message[f.size()];
    if (next == ' ' || next == '[') return std::string(f);
  }
  return "";
}

}  // namespace moe::serve
