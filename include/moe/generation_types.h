// The value types shared by the engine (include/moe/engine.h) and its front ends
// (include/moe/generation_service.h): sampling parameters, per-token log-probabilities
// and a description of the loaded model. Plain data with no behaviour, so a front end
// (serve/, supervisor/) can speak of them without seeing the Engine class.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moe {

// Logits processing, in vLLM's order: logit_bias, then the penalties, then (unless
// greedy) temperature, min_p, top_k, top_p. Values are validated by the engine
// (src/moe/engine/request_validation.h); InvalidArgument names the field.
struct SamplingParams {
  float temperature = 0.8f;       // 0 = greedy (argmax)
  int top_k = 40;                 // 0 = no limit
  float top_p = 0.95f;            // 1 = no nucleus filtering
  // min_p (0 = off, <= 1): drop tokens whose probability is below min_p times the most
  // likely token's (after temperature), as vLLM and llama.cpp.
  float min_p = 0.0f;
  // OpenAI / vLLM penalties on the raw logits. presence and frequency ([-2, 2], 0 =
  // off) count the tokens generated so far: logit -= presence * (count > 0) +
  // frequency * count. repetition (> 0, 1 = off; CTRL, Keskar et al. 2019, as vLLM and
  // HF transformers) applies to tokens in the prompt or generated: a positive logit is
  // divided by it, a negative one multiplied.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  // (token id, bias) pairs added to the logits before anything else (OpenAI
  // logit_bias: ids in the vocabulary, bias in [-100, 100]).
  std::vector<std::pair<int, float>> logit_bias{};
  std::optional<uint64_t> seed;   // same seed + same request = same tokens; unset = random
};

// Log-probabilities of one sampled (or prompt) token: log_softmax of the model's raw
// logits, before logit_bias, the penalties, temperature and truncation (vLLM v1's
// default logprobs_mode "raw_logprobs"; a greedy token is therefore the most likely
// one only when no bias or penalty moved it).
struct TokenLogprob {
  int token_id = 0;
  float logprob = 0;                          // of token_id
  std::vector<std::pair<int, float>> top{};   // the `logprobs` most likely (id, logprob), descending
};

// What the loaded model is (Engine::info(), GenerationService::model_info(); `moe info`
// and the server's /v1/models). Set once at open and never changed.
struct ModelInfo {
  std::string model_dir;
  std::string model_type;
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_experts = 0;
  int top_k = 0;
  int num_moe_layers = 0;              // layers with an MoE block (others are dense)
  int max_context = 0;                 // tokens
  int64_t num_parameters = 0;
  int64_t num_active_parameters = 0;   // per token (top_k experts per layer)
  size_t weight_bytes = 0;             // all tensors, as stored
  size_t decode_bytes_per_token = 0;   // weight bytes read per decode step (active only)
};

}  // namespace moe
