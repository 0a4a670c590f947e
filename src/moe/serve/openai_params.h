// The generation parameters of an OpenAI / vLLM request beyond the basics
// (openai_protocol.cc parses those): n, best_of, logprobs / top_logprobs, echo,
// presence / frequency / repetition penalties, min_p, logit_bias, stop_token_ids,
// ignore_eos, response_format; and the fields this server knows but does not
// implement, refused with a 400 naming them unless at their neutral value.
// Internal to src/moe/serve. Thread-safe (pure functions).
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "moe/serve/openai_protocol.h"

namespace moe::serve {

// Reads the fields above from `body` (a JSON object) into out->seq (sampling,
// stop_token_ids, ignore_eos, logprobs, prompt_logprobs, response_format, json_schema),
// out->n, out->echo and out->logprobs. Ranges: openai_protocol.h (OpenAiRequest).
std::optional<ApiError> parse_generation_params(Endpoint endpoint, const nlohmann::json& body,
                                                const ProtocolLimits& limits, OpenAiRequest* out);

// A 400 naming the first known-but-unimplemented field set to anything but its
// neutral value (e.g. tools non-empty, suffix non-empty, use_beam_search true).
std::optional<ApiError> check_unsupported(Endpoint endpoint, const nlohmann::json& body, const OpenAiRequest& parsed);

}  // namespace moe::serve
