// The "logprobs" of OpenAI responses, from the engine's TokenLogprob entries.
//
// Completions (https://platform.openai.com/docs/api-reference/completions/object):
//   {"tokens": [str], "token_logprobs": [num|null], "top_logprobs": [{str: num}|null],
//    "text_offset": [int]}
// top_logprobs holds the k most likely tokens plus the sampled one (so up to k + 1,
// as OpenAI and vLLM); a prompt's first token (echo) has null logprob and top_logprobs
// (nothing predicts it). text_offset: where each token's string starts in the choice's
// text (echoed prompt included), in bytes of the token strings.
//
// Chat (https://platform.openai.com/docs/api-reference/chat/object):
//   {"content": [{"token": str, "logprob": num, "bytes": [int],
//                 "top_logprobs": [{"token", "logprob", "bytes"}]}]}
// with top_logprobs the k most likely tokens.
//
// Token strings are GenerationService::token_bytes: a token that is part of a
// multi-byte character shows U+FFFD in "token", its raw bytes in "bytes". Logprobs
// that are not finite (a token masked out) are written as -9999.0, as vLLM does.
// Not thread-safe: one instance per choice.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe/generation_types.h"

namespace moe::serve {

// Token id -> the bytes it stands for (GenerationService::token_bytes).
using TokenText = std::function<std::string(int id)>;

class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(TokenText token_text) : token_text_(std::move(token_text)) {}
  // Appends tokens: a prompt's (echo; its first token gets nulls) or generated ones.
  void add(const std::vector<TokenLogprob>& tokens, bool prompt);
  // The entries added since the last take(), as the JSON object above (text_offset
  // keeps counting across calls: streamed chunks).
  nlohmann::json take();

 private:
  TokenText token_text_;
  nlohmann::json tokens_ = nlohmann::json::array(), logprobs_ = nlohmann::json::array(),
                 top_ = nlohmann::json::array(), offsets_ = nlohmann::json::array();
  size_t offset_ = 0;
};

// Chat: the "content" entries for these tokens (append to {"content": [...]}).
nlohmann::json chat_logprob_entries(const std::vector<TokenLogprob>& tokens, const TokenText& token_text);

}  // namespace moe::serve
