// Per-request logits processing before sampling (vLLM v1's order): logit_bias, then the
// repetition, frequency and presence penalties; and the log-probabilities a request
// reports (log_softmax of the model's raw logits, vLLM's default "raw_logprobs").
// Internal to src/moe/engine (Engine::generate and the Scheduler).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "moe/engine.h"
#include "moe/engine/sampler.h"

namespace moe {

// logit_bias and the penalties of one request, with the state they need: the prompt's
// distinct tokens (repetition) and the generated tokens' counts (all three). Values
// are validated before (request_validation.h). Not thread-safe (one per request).
class LogitsProcessor {
 public:
  LogitsProcessor(const SamplingParams& sampling, const std::vector<int>& prompt_token_ids);

  // False when apply() would change nothing (no bias, every penalty off).
  bool active() const { return active_; }
  // In place on logits [vocab], vocab > every id in the request: logit_bias added
  // (repeated ids add up), then for tokens in the prompt or the output so far
  // l = l > 0 ? l / repetition : l * repetition, then for output tokens
  // l -= frequency * count + presence * (count > 0).
  void apply(float* logits) const;
  // Records a generated token (also a resumed one: the penalties see it as output).
  void accept(int token);

 private:
  SamplingParams sampling_;
  bool active_ = false;
  std::unordered_set<int> prompt_tokens_;        // filled only with a repetition penalty
  std::unordered_map<int, int> output_counts_;   // filled only with a penalty
};

// One request's whole path from logits to its next token: LogitsProcessor, then
// Sampler (temperature, min_p, top_k, top_p, or greedy), and its logprobs. The random
// stream advances one draw per sampled token when temperature > 0 (Sampler::skip).
class RequestSampler {
 public:
  // `seed` already resolved (a random one when the request has none); `logprobs`: -1 =
  // off, k >= 0 = fill the token's logprob and its k alternatives.
  RequestSampler(const SamplingParams& sampling, uint64_t seed, const std::vector<int>& prompt_token_ids,
                 int logprobs = -1);
  // Picks the next token from logits [vocab] (processed in place) and records it. With
  // logprobs >= 0 and `logprob` non-null, *logprob gets its TokenLogprob (of the raw
  // logits, before processing).
  int sample(float* logits, int vocab, TokenLogprob* logprob = nullptr);
  // A token generated before (a resumed request): the state advances exactly as if
  // sample() had returned it.
  void replay(int token);
  int logprobs() const { return logprobs_; }

 private:
  LogitsProcessor processor_;
  Sampler sampler_;
  int logprobs_;
  std::vector<float> raw_;  // the raw logits while computing logprobs
};

// The logprob of `token` under log_softmax(logits [vocab]) and the top_k most likely
// (id, logprob), descending (ties: lower id first); 0 <= top_k <= vocab. Computed in
// double, returned as float.
TokenLogprob token_logprob(const float* logits, int vocab, int token, int top_k);

// Prompt logprobs from the logits of a prefilled chunk: `logits` [n, vocab], row j
// (position start + j) predicts prompt[start + j + 1]; rows past the prompt's end are
// ignored. Appends to *out one TokenLogprob per prompt token it covers (top_k
// alternatives each), starting with prompt[0] (logprob 0, no alternatives: nothing
// predicts it) when start == 0.
void add_prompt_logprobs(const float* logits, int vocab, std::span<const int> prompt, int64_t start, int64_t n,
                         int top_k, std::vector<TokenLogprob>* out);

}  // namespace moe
