#include "moe/engine/logits_processor.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moe {

LogitsProcessor::LogitsProcessor(const SamplingParams& sampling, const std::vector<int>& prompt_token_ids)
    : sampling_(sampling) {
  const bool penalties = sampling.presence_penalty != 0.0f || sampling.frequency_penalty != 0.0f ||
                         sampling.repetition_penalty != 1.0f;
  active_ = penalties || !sampling.logit_bias.empty();
  if (sampling.repetition_penalty != 1.0f) prompt_tokens_.insert(prompt_token_ids.begin(), prompt_token_ids.end());
}

void LogitsProcessor::apply(float* logits) const {
  if (!active_) return;
  for (const auto& [id, bias] : sampling_.logit_bias) logits[id] += bias;
  const float rep = sampling_.repetition_penalty;
  auto repeat = [&](int t) {
    float& l = logits[t];
    l = l > 0 ? l / rep : l * rep;
  };
  if (rep != 1.0f) {
    for (int t : prompt_tokens_) repeat(t);
    for (const auto& [t, count] : output_counts_) {
      if (prompt_tokens_.count(t) == 0) repeat(t);
    }
  }
  for (const auto& [t, count] : output_counts_) {
    logits[t] -= sampling_.frequency_penalty * static_cast<float>(count) + sampling_.presence_penalty;
  }
}

void LogitsProcessor::accept(int token) {
  const bool penalties = sampling_.presence_penalty != 0.0f || sampling_.frequency_penalty != 0.0f ||
                         sampling_.repetition_penalty != 1.0f;
  if (penalties) ++output_counts_[token];
}

RequestSampler::RequestSampler(const SamplingParams& sampling, uint64_t seed, const std::vector<int>& prompt_token_ids,
                               int logprobs)
    : processor_(sampling, prompt_token_ids),
      sampler_(sampling.temperature, sampling.top_k, sampling.top_p, seed, sampling.min_p),
      logprobs_(logprobs) {}

int RequestSampler::sample(float* logits, int vocab, TokenLogprob* logprob) {
  const bool want = logprobs_ >= 0 && logprob != nullptr;
  // Logprobs are of the raw logits: keep them when processing would change them.
  if (want && processor_.active()) raw_.assign(logits, logits + vocab);
  processor_.apply(logits);
  const int token = sampler_.sample(logits, vocab);
  processor_.accept(token);
  if (want) *logprob = token_logprob(processor_.active() ? raw_.data() : logits, vocab, token, logprobs_);
  return token;
}

void RequestSampler::replay(int token) {
  sampler_.skip(1);
  processor_.accept(token);
}

TokenLogprob token_logprob(const float* logits, int vocab, int token, int top_k) {
  double mx = -INFINITY;
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double log_z = mx + std::log(sum);
  TokenLogprob out;
  out.token_id = token;
  out.logprob = static_cast<float>(static_cast<double>(logits[token]) - log_z);
  if (top_k <= 0) return out;
  const int k = std::min(top_k, vocab);
  std::vector<int> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top.reserve(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    const int id = order[static_cast<size_t>(i)];
    out.top.emplace_back(id, static_cast<float>(static_cast<double>(logits[id]) - log_z));
  }
  return out;
}

void add_prompt_logprobs(const float* logits, int vocab, std::span<const int> prompt, int64_t start, int64_t n,
                         int top_k, std::vector<TokenLogprob>* out) {
  const auto len = static_cast<int64_t>(prompt.size());
  if (start == 0 && len > 0) out->push_back({.token_id = prompt[0], .logprob = 0, .top = {}});
  for (int64_t p = start; p < start + n && p + 1 < len; ++p) {
    const float* row = logits + (p - start) * vocab;
    out->push_back(token_logprob(row, vocab, prompt[static_cast<size_t>(p + 1)], top_k));
  }
}

}  // namespace moe
