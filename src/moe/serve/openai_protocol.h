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
};

// A validated request. Defaults follow OpenAI: temperature 1, top_p 1, top_k off,
// random seed, completions max_tokens 16. Also read, as vLLM does: top_k (-1 or 0 =
// off) and ignore_eos (bool). For chat, `seq.prompt` is left empty (the
// server renders `messages` through the chat template) and, when neither max_tokens
// nor max_completion_tokens was given, max_tokens_given is false: the server then
// sets max_tokens to what fits in the context (up to the limit).
struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  SeqRequest seq;
  std::vector<ChatMessage> messages;  // chat only
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
};

// Parses and validates a request body (JSON, UTF-8). Unknown fields are ignored, as
// OpenAI does; null counts as absent. Returns the error to send, or nullopt with
// `*out` filled. Errors: 400 for malformed JSON, invalid UTF-8, wrong types or values
// (`param` names the field), unsupported features (n > 1, echo, logprobs, penalties);
// 404 model_not_found for another model name.
// A chat's `messages` field from a request body (e.g. POST /tokenize's), validated as
// in chat completions (400 naming messages[i].role / .content).
std::optional<ApiError> parse_chat_messages(std::string_view body, std::vector<ChatMessage>* out);
std::optional<ApiError> parse_request(Endpoint endpoint, std::string_view body, const ProtocolLimits& limits,
                                      OpenAiRequest* out);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or code points
// above U+10FFFF).
bool is_valid_utf8(std::string_view text);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

// Identity of one response, shared by all its chunks.
struct ResponseMeta {
  std::string id;        // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;   // Unix seconds
  std::string model;
};
// A new random id: prefix + 24 hex digits. Thread-safe.
std::string make_response_id(const std::string& prefix);

// Non-streamed bodies. `finish_reason` as SeqEvent gives it ("stop", "length", "abort").
std::string completion_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                            const Usage& usage);
std::string chat_completion_json(const ResponseMeta& meta, const std::string& text,
                                 const std::string& finish_reason, const Usage& usage);

// Streamed chunk bodies (without the SSE framing). `finish_reason` empty = null.
// With include_usage every chunk carries "usage": null and the last one (usage_chunk)
// has empty choices and the totals, as OpenAI sends them.
std::string completion_chunk_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                                  bool include_usage);
// The first chat chunk: delta {"role": "assistant", "content": ""}.
std::string chat_role_chunk_json(const ResponseMeta& meta, bool include_usage);
// delta {"content": text}, or {} when `text` is empty and finish_reason is set.
std::string chat_chunk_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                            bool include_usage);
std::string usage_chunk_json(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage);

// Server-sent-event framing: "data: <payload>\n\n"; the stream ends with kSseDone.
std::string sse_event(const std::string& payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace moe::serve
