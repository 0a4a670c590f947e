// The OpenAI HTTP API as plain data: request bodies of POST /v1/completions and
// /v1/chat/completions parsed and validated into a SeqRequest, and the JSON of
// responses, streamed chunks (server-sent events) and errors, in OpenAI's formats
// (https://platform.openai.com/docs/api-reference/completions,
//  .../chat/create-chat-completion). No I/O; every function is thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe/generation_service.h"

namespace moe::serve {

// An OpenAI-style error: sent as
//   {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
// with HTTP status `http_status`.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending request field; empty = null
  std::string code;   // e.g. "model_not_found"; empty = null
};
std::string error_json(const ApiError& error);
// The `type` OpenAI and vLLM use for an HTTP status (400 invalid_request_error,
// 401 authentication_error, 404 not_found_error, 429 rate_limit_error, 5xx
// internal_server_error / service_unavailable ...).
std::string error_type_for_status(int http_status);

enum class Endpoint { kCompletions, kChatCompletions };

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant" ("developer" is read as "system")
  std::string content;  // text parts of an array content are concatenated
};

// What the server allows; used by the validation.
struct ProtocolLimits {
  std::string served_model_name;  // `model` must equal it (else 404 model_not_found); absent = this
  int max_tokens_limit = 0;       // max_tokens above it is a 400; must be >= 1
  int vocab_size = 0;             // token-id prompts must be in [0, vocab_size); 0 = unchecked
  int max_n = 16;                 // `n` above it is a 400 (ServerOptions::max_n, `moe serve --max-n`)
};

// At most this many prompts in one completions request (a list of prompts).
inline constexpr int kMaxPromptsPerRequest = 64;
// Longest cache_salt accepted (bytes): a salt is an opaque tenant or session tag.
inline constexpr size_t kMaxCacheSaltBytes = 256;
// The largest `logprobs` (completions) and `top_logprobs` (chat), as OpenAI and vLLM.
inline constexpr int kMaxLogprobs = 20;

// One prompt of a completions request: its text, or token ids when non-empty.
struct PromptInput {
  std::string text;
  std::vector<int> token_ids;
};

// A validated request. Defaults follow OpenAI: temperature 1, top_p 1, top_k off,
// random seed, completions max_tokens 16, n 1. Also read, as vLLM does: top_k (-1 or 0
// = off), min_p, repetition_penalty, stop_token_ids and ignore_eos. `seq` carries
// everything shared by the request's sequences (sampling, stop, logprobs,
// response_format) and the first prompt; sequence_requests() expands it into the
// n * prompts sequences to submit. For chat, `seq.prompt` is left empty (the server
// renders `messages` through the chat template) and, when neither max_tokens nor
// max_completion_tokens was given, max_tokens_given is false: the server then sets
// max_tokens to what fits in the context (up to the limit).
//
// Ranges (400 naming the field outside them): n 1..max_n (best_of only equal to n);
// completions logprobs 0..20; chat logprobs bool and top_logprobs 0..20 (only with
// logprobs true); presence_penalty and frequency_penalty [-2, 2]; repetition_penalty
// > 0; min_p [0, 1]; logit_bias an object of token-id strings (in the vocabulary) to
// numbers in [-100, 100]; stop_token_ids token ids in the vocabulary; response_format
// {"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema",
// "strict"}}. echo (completions): the prompt's text before each choice's text, and with
// logprobs the prompt tokens' logprobs (SeqRequest::prompt_logprobs; the first one null).
struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  SeqRequest seq;
  std::vector<PromptInput> prompts;   // completions: every prompt (>= 1), seq has the first; chat: empty
  std::vector<ChatMessage> messages;  // chat only
  int n = 1;                          // choices per prompt
  bool echo = false;                  // completions only
  // -1 = no logprobs in the response; k >= 0: each token's logprob and k alternatives
  // (completions `logprobs`; chat `top_logprobs` when `logprobs` is true). Also in seq.logprobs.
  int logprobs = -1;
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
};

// A chat's `messages` field from a request body (e.g. POST /tokenize's), validated as
// in chat completions (400 naming messages[i].role / .content).
std::optional<ApiError> parse_chat_messages(std::string_view body, std::vector<ChatMessage>* out);

// Parses and validates a request body (JSON, UTF-8). Unknown fields are ignored, as
// OpenAI does; null counts as absent. Returns the error to send, or nullopt with
// `*out` filled. Errors: 400 for malformed JSON, invalid UTF-8, wrong types or values
// (`param` names the field), fields this server does not implement at a value other
// than their neutral one (tools, functions, tool_choice other than "none"/"auto",
// suffix, best_of != n, use_beam_search, guided_*, min_tokens, prompt_logprobs,
// include_stop_str_in_output, skip_special_tokens false, chat echo, ...: the 400
// names it); 404 model_not_found for another model name.
std::optional<ApiError> parse_request(Endpoint endpoint, std::string_view body, const ProtocolLimits& limits,
                                      OpenAiRequest* out);

// The sequences to submit for a parsed request, prompt-major: choice p * n + j is
// sample j of prompt p (OpenAI's choice index). With a seed, sample j uses seed + j,
// so the n samples differ but are each reproducible (and a prompt list gives every
// prompt the same seeds as separate requests). echo with logprobs asks for prompt
// logprobs. For chat, call it after `seq.prompt` was rendered.
std::vector<SeqRequest> sequence_requests(const OpenAiRequest& request);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or code points
// above U+10FFFF).
bool is_valid_utf8(std::string_view text);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // Of prompt_tokens, those whose KV came from the prefix cache (OpenAI's
  // usage.prompt_tokens_details.cached_tokens).
  int cached_tokens = 0;
};

// Identity of one response, shared by all its chunks.
struct ResponseMeta {
  std::string id;        // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;   // Unix seconds
  std::string model;
};
// A new random id: prefix + 24 hex digits. Thread-safe.
std::string make_response_id(const std::string& prefix);

// One choice of a response or a streamed chunk. `logprobs` is the choice's "logprobs"
// value: null, or what openai_logprobs.h builds.
struct ChoiceOut {
  int index = 0;
  std::string text;
  std::string finish_reason;  // empty = null
  nlohmann::json logprobs;    // null = none
};

// Non-streamed bodies, choices in the order given. `finish_reason` as SeqEvent gives it
// ("stop", "length", "abort").
std::string completion_json(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices, const Usage& usage);
std::string chat_completion_json(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices, const Usage& usage);
// One choice (index 0), no logprobs.
inline std::string completion_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                                   const Usage& usage) {
  return completion_json(meta, {ChoiceOut{0, text, finish_reason, nullptr}}, usage);
}
inline std::string chat_completion_json(const ResponseMeta& meta, const std::string& text,
                                        const std::string& finish_reason, const Usage& usage) {
  return chat_completion_json(meta, {ChoiceOut{0, text, finish_reason, nullptr}}, usage);
}

// Streamed chunk bodies (without the SSE framing), one choice each.
// With include_usage every chunk carries "usage": null and the last one (usage_chunk)
// has empty choices and the totals, as OpenAI sends them.
std::string completion_chunk_json(const ResponseMeta& meta, const ChoiceOut& choice, bool include_usage);
// The first chat chunk of choice `index`: delta {"role": "assistant", "content": ""}.
std::string chat_role_chunk_json(const ResponseMeta& meta, int index, bool include_usage);
// delta {"content": text}, or {} when `text` is empty and finish_reason is set.
std::string chat_chunk_json(const ResponseMeta& meta, const ChoiceOut& choice, bool include_usage);
inline std::string completion_chunk_json(const ResponseMeta& meta, const std::string& text,
                                         const std::string& finish_reason, bool include_usage) {
  return completion_chunk_json(meta, ChoiceOut{0, text, finish_reason, nullptr}, include_usage);
}
inline std::string chat_role_chunk_json(const ResponseMeta& meta, bool include_usage) {
  return chat_role_chunk_json(meta, 0, include_usage);
}
inline std::string chat_chunk_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                                   bool include_usage) {
  return chat_chunk_json(meta, ChoiceOut{0, text, finish_reason, nullptr}, include_usage);
}
std::string usage_chunk_json(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage);

// Server-sent-event framing: "data: <payload>\n\n"; the stream ends with kSseDone.
std::string sse_event(const std::string& payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace moe::serve
