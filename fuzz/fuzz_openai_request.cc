// libFuzzer target: an HTTP request body through the OpenAI request parser and
// validator (parse_request, both endpoints), the sequences it yields, and
// /tokenize's chat-message parser.
#include <cstdint>
#include <string>

#include "moe/serve/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  moe::serve::ProtocolLimits limits;
  limits.served_model_name = "fuzz";
  limits.max_tokens_limit = 2048;
  limits.vocab_size = 32000;
  limits.max_n = 16;
  for (auto endpoint : {moe::serve::Endpoint::kCompletions, moe::serve::Endpoint::kChatCompletions}) {
    moe::serve::OpenAiRequest r;
    auto err = moe::serve::parse_request(endpoint, body, limits, &r);
    if (err) {
      (void)moe::serve::error_json(*err);
    } else {
      (void)moe::serve::sequence_requests(r);
    }
  }
  std::vector<moe::serve::ChatMessage> messages;
  (void)moe::serve::parse_chat_messages(body, &messages);
  return 0;
}
