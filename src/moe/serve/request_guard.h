// Cheap checks of a generation request before anything costly, and the request field
// an engine error is about (hardening against bad requests). Internal to src/moe/serve; no I/O.
#pragma once

#include <cstddef>
#include <string>

#include "moe/generation_service.h"
#include "moe/serve/openai_protocol.h"

namespace moe::serve {

// The byte length of the longest token of the vocabulary [0, vocab_size) as
// service.token_bytes() gives it; 0 when the service knows no token's bytes (a fake).
// Costs one token_bytes() call per id: call once, at start-up.
size_t longest_token_bytes(const GenerationService& service, int vocab_size);

// The most bytes a prompt that fits `context` tokens can have, so that longer ones are
// refused before tokenizing: each token stands for at most `longest_token` bytes of text;
// x 2 because a normalizer (NFC) may shrink the text before it is tokenized, + 1024.
// 0 (no bound) when longest_token or context is 0.
size_t prompt_byte_bound(int context, size_t longest_token);

// The request field an engine (GenerationService::submit) InvalidArgument message is
// about: "temperature must be ..." -> "temperature", "stop strings must ..." -> "stop",
// the context-length error (prompt + max_tokens over the context or the KV cache) and
// prompt errors -> "prompt" (completions) or "messages" (chat); "" when unknown.
std::string param_of_engine_error(const std::string& message, Endpoint endpoint);

// Whether the message is the context-length error (OpenAI's code "context_length_exceeded").
bool is_context_length_error(const std::string& message);

}  // namespace moe::serve
