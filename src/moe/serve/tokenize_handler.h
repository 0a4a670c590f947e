// POST /tokenize and POST /detokenize, as vLLM serves them (no /v1 prefix):
//
//   /tokenize    {"model"?, "prompt": "...", "add_special_tokens"? (default true),
//                 "return_token_strs"? (default false)}
//             or {"model"?, "messages": [...] (rendered through the chat template),
//                 "add_generation_prompt"? (default true), "add_special_tokens"?
//                 (default false: the template carries its own), "return_token_strs"?}
//             -> {"count": N, "max_model_len": CONTEXT, "tokens": [ids],
//                 "token_strs": [...] (only with return_token_strs; each token's text as
//                 GenerationService::token_bytes gives it, invalid UTF-8 replaced)}
//   /detokenize  {"model"?, "tokens": [ids]} -> {"prompt": "text"} (special tokens dropped)
//
// Errors (OpenAI error JSON naming the field in `param`): 400 for a body that is not a
// JSON object, a field of the wrong type, both or neither of prompt/messages, a token id
// outside the vocabulary, a conversation the template refuses; 404 (model_not_found) for
// another model than the served one; 503 when the engine is unavailable. Thread-safe
// (reads only; the service's methods are thread-safe).
#pragma once

#include <string>
#include <string_view>

#include "moe/generation_service.h"
#include "moe/serve/chat_template.h"

namespace moe::serve {

struct TokenizeContext {
  const GenerationService* service = nullptr;
  const ChatTemplate* chat_template = nullptr;
  std::string served_model_name;
  int max_model_len = 0;  // the context length reported as max_model_len
};

struct HandlerReply {
  int status = 200;
  std::string body;  // JSON
};

HandlerReply handle_tokenize(const TokenizeContext& ctx, std::string_view body);
HandlerReply handle_detokenize(const TokenizeContext& ctx, std::string_view body);

}  // namespace moe::serve
