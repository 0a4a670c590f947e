// One validator for generation requests, used by Engine::generate and
// Scheduler::submit: sampling values, max_tokens, stop strings, prompt token ids, and
// prompt + max_tokens within the model's context. Every failure is InvalidArgument with
// a message naming the offending field and value. Internal to src/moe/engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/engine.h"
#include "moe/model/tokenizer.h"
#include "moe/status.h"

namespace moe {

inline constexpr int kMaxStopStrings = 4;

// The fields of a GenerateRequest or SeqRequest that are checked (views; not owned).
struct RequestFields {
  const std::string& prompt;               // tokenized when prompt_token_ids is empty
  const std::vector<int>& prompt_token_ids;
  int max_tokens;
  const SamplingParams& sampling;
  const std::vector<std::string>& stop;    // at most kMaxStopStrings, none empty
};

// What the request is checked against.
struct RequestLimits {
  const Tokenizer* tokenizer = nullptr;  // required: encodes `prompt` (BOS per tokenizer_config)
  int vocab_size = 0;                    // token ids in [0, vocab_size)
  int64_t max_context = 0;               // prompt + max_tokens at most this many tokens
  int min_max_tokens = 0;                // 0: Engine::generate; 1: the Scheduler
};

// InvalidArgument naming the bad sampling value (temperature, top_p, top_k).
Status validate_sampling(const SamplingParams& sampling);

// Checks, in this order: sampling, max_tokens, stop strings, the prompt (empty, ids
// outside the vocabulary), prompt + max_tokens against the context. Returns the prompt's
// token ids (`prompt_token_ids` if non-empty, else `prompt` tokenized).
StatusOr<std::vector<int>> validate_request(const RequestFields& request, const RequestLimits& limits);

}  // namespace moe
