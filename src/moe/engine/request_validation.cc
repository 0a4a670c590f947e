#include "moe/engine/request_validation.h"

#include <cmath>
#include <utility>

#include "moe/core/text_format.h"

namespace moe {

Status validate_sampling(const SamplingParams& sp, int vocab_size) {
  if (!(sp.temperature >= 0.0f) || !std::isfinite(sp.temperature)) {
    return invalid_argument("temperature must be a finite number >= 0 (got " + format_g(sp.temperature) + ")");
  }
  if (!(sp.top_p > 0.0f && sp.top_p <= 1.0f)) {
    return invalid_argument("top_p must be in (0, 1] (got " + format_g(sp.top_p) + ")");
  }
  if (sp.top_k < 0) return invalid_argument("top_k must be >= 0 (got " + std::to_string(sp.top_k) + ")");
  if (!(sp.min_p >= 0.0f && sp.min_p <= 1.0f)) {
    return invalid_argument("min_p must be in [0, 1] (got " + format_g(sp.min_p) + ")");
  }
  const std::pair<const char*, float> penalties[] = {{"presence_penalty", sp.presence_penalty},
                                                     {"frequency_penalty", sp.frequency_penalty}};
  for (const auto& [name, value] : penalties) {
    if (!(value >= -kMaxAbsPenalty && value <= kMaxAbsPenalty)) {
      return invalid_argument(std::string(name) + " must be in [-2, 2] (got " + format_g(value) + ")");
    }
  }
  if (!(sp.repetition_penalty > 0.0f) || !std::isfinite(sp.repetition_penalty)) {
    return invalid_argument("repetition_penalty must be a finite number > 0 (got " + format_g(sp.repetition_penalty) +
                            ")");
  }
  for (const auto& [id, bias] : sp.logit_bias) {
    if (!(bias >= -kMaxAbsLogitBias && bias <= kMaxAbsLogitBias)) {
      return invalid_argument("logit_bias for token " + std::to_string(id) + " must be in [-100, 100] (got " +
                              format_g(bias) + ")");
    }
    if (vocab_size > 0 && (id < 0 || id >= vocab_size)) {
      return invalid_argument("logit_bias token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size) + ")");
    }
  }
  return ok_status();
}

Status validate_scheduler_options(const SchedulerOptions& o) {
  if (o.max_num_seqs < 1) return invalid_argument("max_num_seqs must be >= 1 (got " + std::to_string(o.max_num_seqs) + ")");
  if (o.max_num_batched_tokens < o.max_num_seqs) {
    return invalid_argument("max_num_batched_tokens (" + std::to_string(o.max_num_batched_tokens) +
                            ") must be >= max_num_seqs (" + std::to_string(o.max_num_seqs) +
                            "): every running sequence decodes one token per step");
  }
  if (o.kv_block_size < 1 || o.kv_block_size > 4096) {
    return invalid_argument("kv_block_size must be in [1, 4096] (got " + std::to_string(o.kv_block_size) + ")");
  }
  if (!(o.idle_heartbeat_seconds > 0)) {
    return invalid_argument("idle_heartbeat_seconds must be > 0 (got " + std::to_string(o.idle_heartbeat_seconds) + ")");
  }
  if (!(o.liveness_timeout_seconds > 0 && std::isfinite(o.liveness_timeout_seconds))) {
    return invalid_argument("liveness_timeout_seconds must be a finite number > 0 (got " +
                            std::to_string(o.liveness_timeout_seconds) + ")");
  }
  if (o.kv_cache_tokens < 0) {
    return invalid_argument("kv_cache_tokens must be >= 0 (got " + std::to_string(o.kv_cache_tokens) + ")");
  }
  if (o.kv_cache_tokens > 0 && o.kv_cache_memory_bytes > 0) {
    return invalid_argument("kv_cache_tokens and kv_cache_memory_bytes both size the KV cache: give one");
  }
  if (!(o.memory_utilization > 0 && o.memory_utilization <= 1)) {
    return invalid_argument("memory_utilization must be in (0, 1] (got " + std::to_string(o.memory_utilization) + ")");
  }
  if (o.prefix_hash_bits_for_test < 0 || o.prefix_hash_bits_for_test > 64) {
    return invalid_argument("prefix_hash_bits_for_test must be in [0, 64] (got " +
                            std::to_string(o.prefix_hash_bits_for_test) + ")");
  }
  if (!o.kv_offload_dir.empty() && !o.enable_prefix_caching) {
    return invalid_argument("kv_offload_dir needs prefix caching: the disk tier holds cached prefix blocks");
  }
  if (!o.kv_offload_dir.empty() && o.kv_offload_bytes == 0) return invalid_argument("kv_offload_bytes must be > 0");
  if (o.reserve_max_tokens && o.enable_prefix_caching) {
    // Reservation holds each request's worst case; with shared prefix blocks that would
    // count blocks twice. It is a baseline for on-demand allocation, measured without.
    return invalid_argument("reserve_max_tokens needs enable_prefix_caching off");
  }
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

Status validate_logprobs(const char* name, int k) {
  if (k < -1 || k > kMaxLogprobs) {
    return invalid_argument(std::string(name) + " must be in [-1, " + std::to_string(kMaxLogprobs) +
                            "] (-1 = off; got " + std::to_string(k) + ")");
  }
  return ok_status();
}

Status validate_stop_token_ids(const std::vector<int>& ids, int vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return invalid_argument("stop_token_ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
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
  MOE_RETURN_IF_ERROR(validate_sampling(request.sampling, limits.vocab_size));
  MOE_RETURN_IF_ERROR(validate_logprobs("logprobs", request.logprobs));
  MOE_RETURN_IF_ERROR(validate_logprobs("prompt_logprobs", request.prompt_logprobs));
  if (request.max_tokens < limits.min_max_tokens) {
    return invalid_argument("max_tokens must be >= " + std::to_string(limits.min_max_tokens) + " (got " +
                            std::to_string(request.max_tokens) + ")");
  }
  MOE_RETURN_IF_ERROR(validate_stop_strings(request.stop));
  MOE_RETURN_IF_ERROR(validate_stop_token_ids(request.stop_token_ids, limits.vocab_size));
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
