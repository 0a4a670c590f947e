// One validator for generation requests, used by Engine::generate and
// Scheduler::submit: sampling values, logprobs, max_tokens, stop strings and stop
// token ids, prompt token ids, and prompt + max_tokens within the model's context
// (and the Scheduler's options). Every failure is InvalidArgument with
// a message naming the offending field and value. Internal to src/moe/engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/engine.h"
#include "moe/model/tokenizer.h"
#include "moe/scheduler.h"
#include "moe/status.h"

namespace moe {

inline constexpr int kMaxStopStrings = 4;
inline constexpr int kMaxLogprobs = 20;        // logprobs / prompt_logprobs at most (as vLLM's default)
inline constexpr float kMaxAbsPenalty = 2.0f;  // presence / frequency penalty bound (OpenAI, vLLM)
inline constexpr float kMaxAbsLogitBias = 100.0f;

// The fields of a GenerateRequest or SeqRequest that are checked (views; not owned).
struct RequestFields {
  const std::string& prompt;               // tokenized when prompt_token_ids is empty
  const std::vector<int>& prompt_token_ids;
  int max_tokens;
  const SamplingParams& sampling;
  const std::vector<std::string>& stop;    // at most kMaxStopStrings, none empty
  const std::vector<int>& stop_token_ids;  // in the vocabulary
  int logprobs = -1;                       // in [-1, kMaxLogprobs]
  int prompt_logprobs = -1;                // in [-1, kMaxLogprobs]
};

// What the request is checked against.
struct RequestLimits {
  const Tokenizer* tokenizer = nullptr;  // required: encodes `prompt` (BOS per tokenizer_config)
  int vocab_size = 0;                    // token ids in [0, vocab_size)
  int64_t max_context = 0;               // prompt + max_tokens at most this many tokens
  int min_max_tokens = 0;                // 0: Engine::generate; 1: the Scheduler
};

// Scheduler::create's option checks: InvalidArgument naming the option (max_num_seqs,
// max_num_batched_tokens, kv_block_size, idle_heartbeat_seconds,
// liveness_timeout_seconds, kv_cache_tokens).
Status validate_scheduler_options(const SchedulerOptions& options);

// InvalidArgument naming the bad sampling value: temperature (finite, >= 0), top_p
// (0, 1], top_k >= 0, min_p [0, 1], presence_penalty and frequency_penalty [-2, 2],
// repetition_penalty (finite, > 0: vLLM's bound), logit_bias values [-100, 100]. With
// vocab_size > 0 also logit_bias ids in [0, vocab_size).
Status validate_sampling(const SamplingParams& sampling, int vocab_size = 0);

// Checks, in this order: sampling (with logit_bias ids), logprobs, prompt_logprobs,
// max_tokens, stop strings, stop_token_ids, the prompt (empty, ids outside the
// vocabulary), prompt + max_tokens against the context. Returns the prompt's
// token ids (`prompt_token_ids` if non-empty, else `prompt` tokenized).
StatusOr<std::vector<int>> validate_request(const RequestFields& request, const RequestLimits& limits);

}  // namespace moe
