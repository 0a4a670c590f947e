// The response half of openai_protocol.h: bodies, streamed chunks and ids.
#include <atomic>
#include <cstdio>
#include <random>

#include "moe/serve/json_fields.h"
#include "moe/serve/openai_protocol.h"

namespace moe::serve {
namespace {

using namespace detail;  // NOLINT: dump, null_or (json_fields.h)

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json header(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

json completion_choice(const ChoiceOut& c) {
  return {{"index", c.index}, {"text", c.text}, {"logprobs", c.logprobs}, {"finish_reason", null_or(c.finish_reason)}};
}

}  // namespace

std::string make_response_id(const std::string& prefix) {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  // splitmix64 of a counter: unique within the process, unpredictable enough for ids.
  uint64_t z = counter.fetch_add(0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
  auto mix = [](uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(mix(z)),
                static_cast<unsigned long long>(mix(z ^ 0xA5A5A5A5ull) & 0xFFFFFFFFull));
  return prefix + buf;
}

std::string completion_json(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices, const Usage& usage) {
  json j = header(meta, "text_completion");
  j["choices"] = json::array();
  for (const ChoiceOut& c : choices) j["choices"].push_back(completion_choice(c));
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string chat_completion_json(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices, const Usage& usage) {
  json j = header(meta, "chat.completion");
  j["choices"] = json::array();
  for (const ChoiceOut& c : choices) {
    j["choices"].push_back({{"index", c.index},
                            {"message", {{"role", "assistant"}, {"content", c.text}}},
                            {"logprobs", c.logprobs},
                            {"finish_reason", null_or(c.finish_reason)}});
  }
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string completion_chunk_json(const ResponseMeta& meta, const ChoiceOut& choice, bool include_usage) {
  json j = header(meta, "text_completion");
  j["choices"] = json::array({completion_choice(choice)});
  if (include_usage) j["usage"] = nullptr;
  return dump(j);
}

std::string chat_role_chunk_json(const ResponseMeta& meta, int index, bool include_usage) {
  json j = header(meta, "chat.completion.chunk");
  j["choices"] = json::array({{{"index", index},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (include_usage) j["usage"] = nullptr;
  return dump(j);
}

std::string chat_chunk_json(const ResponseMeta& meta, const ChoiceOut& choice, bool include_usage) {
  json j = header(meta, "chat.completion.chunk");
  json delta = json::object();
  if (!choice.text.empty() || choice.finish_reason.empty()) delta["content"] = choice.text;
  j["choices"] = json::array({{{"index", choice.index},
                               {"delta", delta},
                               {"logprobs", choice.logprobs},
                               {"finish_reason", null_or(choice.finish_reason)}}});
  if (include_usage) j["usage"] = nullptr;
  return dump(j);
}

std::string usage_chunk_json(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage) {
  json j = header(meta, endpoint == Endpoint::kCompletions ? "text_completion" : "chat.completion.chunk");
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string sse_event(const std::string& payload) { return "data: " + payload + "\n\n"; }

}  // namespace moe::serve
