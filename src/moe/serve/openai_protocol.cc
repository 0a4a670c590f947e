#include "moe/serve/openai_protocol.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "moe/core/text_format.h"
#include "moe/serve/json_fields.h"
#include "moe/serve/openai_params.h"

namespace moe::serve {
namespace {

using namespace detail;  // NOLINT: the parser's field helpers (json_fields.h)

// `prompt`: a string, an array of token ids, or a list (<= kMaxPromptsPerRequest) of
// strings or of token-id arrays. Fills out->prompts and the first one into out->seq.
std::optional<ApiError> parse_prompt(const json& body, const ProtocolLimits& limits, OpenAiRequest* out) {
  const json* p = field(body, "prompt");
  if (!p) return bad("prompt", "'prompt' is required");
  auto read_ids = [&](const json& arr, std::vector<int>* ids) -> std::optional<ApiError> {
    for (const json& t : arr) {
      if (!t.is_number_integer()) return bad("prompt", "a token-id 'prompt' must hold only integers");
      const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                                                : t.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int>::max() || (limits.vocab_size > 0 && id >= limits.vocab_size)) {
        return bad("prompt", "token id " + t.dump() + " in 'prompt' is outside the vocabulary [0, " +
                                 std::to_string(limits.vocab_size) + ")");
      }
      ids->push_back(static_cast<int>(id));
    }
    if (ids->empty()) return bad("prompt", "'prompt' must not be empty");
    return std::nullopt;
  };
  std::vector<PromptInput>& prompts = out->prompts;
  if (p->is_string()) {
    prompts.push_back({p->get<std::string>(), {}});
  } else if (p->is_array()) {
    if (p->empty()) return bad("prompt", "'prompt' must not be empty");
    const json& first = p->front();
    if (first.is_number_integer()) {
      prompts.emplace_back();
      if (auto e = read_ids(*p, &prompts.back().token_ids)) return e;
    } else if (first.is_string() || first.is_array()) {
      if (p->size() > static_cast<size_t>(kMaxPromptsPerRequest)) {
        return bad("prompt", "'prompt' holds " + std::to_string(p->size()) + " prompts; at most " +
                                 std::to_string(kMaxPromptsPerRequest) + " per request");
      }
      for (const json& x : *p) {
        prompts.emplace_back();
        if (first.is_string() && x.is_string()) {
          prompts.back().text = x.get<std::string>();
        } else if (first.is_array() && x.is_array()) {
          if (auto e = read_ids(x, &prompts.back().token_ids)) return e;
        } else {
          return bad("prompt", "a list of prompts must hold only strings or only token-id arrays");
        }
      }
    } else {
      return bad("prompt", "'prompt' must be a string, an array of token ids, or an array of strings or of token-id "
                           "arrays");
    }
  } else {
    return wrong_type("prompt", *p, "a string or an array");
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].text.empty() && prompts[i].token_ids.empty()) {
      return bad("prompt", prompts.size() == 1 ? "'prompt' must not be empty"
                                               : "'prompt[" + std::to_string(i) + "]' must not be empty");
    }
  }
  out->seq.prompt = prompts.front().text;
  out->seq.prompt_token_ids = prompts.front().token_ids;
  return std::nullopt;
}

std::optional<ApiError> parse_content(const json& c, const std::string& param, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (c.is_array()) {
    for (size_t i = 0; i < c.size(); ++i) {
      const json& part = c[i];
      const std::string pp = param + "[" + std::to_string(i) + "]";
      if (!part.is_object()) return wrong_type(pp, part, "an object {\"type\": \"text\", \"text\": ...}");
      auto type = part.find("type");
      if (type == part.end() || !type->is_string() || *type != "text") {
        return bad(pp + ".type", "only content parts of type 'text' are supported");
      }
      auto text = part.find("text");
      if (text == part.end() || !text->is_string()) return bad(pp + ".text", "'" + pp + ".text' must be a string");
      *out += text->get<std::string>();
    }
    return std::nullopt;
  }
  return wrong_type(param, c, "a string or an array of text parts");
}

std::optional<ApiError> parse_messages(const json& body, std::vector<ChatMessage>* out) {
  const json* m = field(body, "messages");
  if (!m) return bad("messages", "'messages' is required");
  if (!m->is_array()) return wrong_type("messages", *m, "an array");
  if (m->empty()) return bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return wrong_type(param, msg, "an object");
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string()) return bad(param + ".role", "'" + param + ".role' must be a string");
    ChatMessage cm;
    cm.role = role->get<std::string>();
    if (cm.role == "developer") cm.role = "system";
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant") {
      return bad(param + ".role", "'" + param + ".role' must be 'system', 'user' or 'assistant' (got '" +
                                      role->get<std::string>() + "')");
    }
    auto content = msg.find("content");
    if (content == msg.end() || content->is_null()) {
      if (cm.role != "assistant") return bad(param + ".content", "'" + param + ".content' is required");
    } else if (auto e = parse_content(*content, param + ".content", &cm.content)) {
      return e;
    }
    out->push_back(std::move(cm));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& body, std::vector<std::string>* out) {
  const json* s = field(body, "stop");
  if (!s) return std::nullopt;
  if (s->is_string()) {
    out->push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > 4) return bad("stop", "'stop' holds at most 4 strings (got " + std::to_string(s->size()) + ")");
    for (const json& x : *s) {
      if (!x.is_string()) return bad("stop", "'stop' must be a string or an array of strings");
      out->push_back(x.get<std::string>());
    }
  } else {
    return wrong_type("stop", *s, "a string or an array of strings");
  }
  for (const std::string& x : *out) {
    if (x.empty()) return bad("stop", "'stop' strings must not be empty");
  }
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const json& body, SamplingParams* s) {
  std::optional<double> temperature, top_p;
  if (auto e = read_number(body, "temperature", &temperature)) return e;
  if (temperature && !(*temperature >= 0.0 && *temperature <= 2.0)) {
    return bad("temperature", "'temperature' must be in [0, 2] (got " + format_g(*temperature) + ")");
  }
  if (auto e = read_number(body, "top_p", &top_p)) return e;
  if (top_p && !(*top_p > 0.0 && *top_p <= 1.0)) {
    return bad("top_p", "'top_p' must be in (0, 1] (got " + format_g(*top_p) + ")");
  }
  std::optional<int64_t> top_k, seed;
  if (auto e = read_int(body, "top_k", -1, std::numeric_limits<int>::max(), &top_k)) return e;
  if (auto e = read_int(body, "seed", INT64_MIN, INT64_MAX, &seed)) return e;
  s->temperature = temperature ? static_cast<float>(*temperature) : 1.0f;
  // A valid top_p below float's range (1e-300) would round to 0 and be refused: the
  // smallest positive float keeps the same nucleus (the most likely token alone).
  s->top_p = top_p ? std::max(static_cast<float>(*top_p), std::numeric_limits<float>::denorm_min()) : 1.0f;
  s->top_k = top_k && *top_k > 0 ? static_cast<int>(*top_k) : 0;
  if (seed) s->seed = static_cast<uint64_t>(*seed);
  return std::nullopt;
}

std::optional<ApiError> parse_max_tokens(Endpoint endpoint, const json& body, const ProtocolLimits& limits,
                                         OpenAiRequest* out) {
  const char* name = "max_tokens";
  std::optional<int64_t> v;
  if (endpoint == Endpoint::kChatCompletions && field(body, "max_completion_tokens")) name = "max_completion_tokens";
  if (auto e = read_int(body, name, INT64_MIN, INT64_MAX, &v)) return e;
  if (!v) {
    out->seq.max_tokens = std::min(16, limits.max_tokens_limit);
    return std::nullopt;
  }
  if (*v < 1) return bad(name, "'" + std::string(name) + "' must be at least 1 (got " + std::to_string(*v) + ")");
  if (*v > limits.max_tokens_limit) {
    return bad(name, "'" + std::string(name) + "' must be at most " + std::to_string(limits.max_tokens_limit) +
                         " on this server (got " + std::to_string(*v) + ")");
  }
  out->seq.max_tokens = static_cast<int>(*v);
  out->max_tokens_given = true;
  return std::nullopt;
}

std::optional<ApiError> parse_body(Endpoint endpoint, const json& body, const ProtocolLimits& limits,
                                   OpenAiRequest* out) {
  if (!body.is_object()) return bad("", "the request body must be a JSON object, not " + type_name(body));
  // 'model' may be left out (as vLLM and llama.cpp's server allow): the served model.
  const json* model = field(body, "model");
  if (model && !model->is_string()) return wrong_type("model", *model, "a string");
  out->model = model ? model->get<std::string>() : limits.served_model_name;
  if (out->model != limits.served_model_name) {
    ApiError e;
    e.http_status = 404;
    e.type = "invalid_request_error";
    e.param = "model";
    e.code = "model_not_found";
    e.message = "The model '" + out->model + "' does not exist; this server serves '" + limits.served_model_name + "'";
    return e;
  }
  if (endpoint == Endpoint::kCompletions) {
    if (auto e = parse_prompt(body, limits, out)) return e;
  } else {
    if (auto e = parse_messages(body, &out->messages)) return e;
  }
  if (auto e = parse_max_tokens(endpoint, body, limits, out)) return e;
  if (auto e = parse_sampling(body, &out->seq.sampling)) return e;
  if (auto e = parse_stop(body, &out->seq.stop)) return e;
  if (auto e = parse_generation_params(endpoint, body, limits, out)) return e;
  if (auto e = check_unsupported(endpoint, body, *out)) return e;
  std::optional<bool> stream;
  if (auto e = read_bool(body, "stream", &stream)) return e;
  out->stream = stream.value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", *so, "an object");
    if (!out->stream) return bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    std::optional<bool> usage;
    if (auto e = read_bool(*so, "include_usage", &usage)) {
      e->param = "stream_options.include_usage";
      e->message = "'stream_options.include_usage' must be a boolean";
      return e;
    }
    out->include_usage = usage.value_or(false);
  }
  return std::nullopt;
}

}  // namespace

std::string error_type_for_status(int http_status) {
  switch (http_status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 405: return "method_not_allowed_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return http_status >= 500 ? "internal_server_error" : "invalid_request_error";
  }
}

std::string error_json(const ApiError& error) {
  json j = {{"error",
             {{"message", error.message},
              {"type", error.type},
              {"param", null_or(error.param)},
              {"code", null_or(error.code)}}}};
  return dump(j);
}

bool is_valid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      return false;  // continuation byte, overlong 2-byte lead, or above U+10FFFF
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::optional<ApiError> parse_request(Endpoint endpoint, std::string_view body, const ProtocolLimits& limits,
                                      OpenAiRequest* out) {
  static const OpenAiRequest kFresh{};  // (assigning a temporary trips GCC 12's -Wmaybe-uninitialized)
  *out = kFresh;
  out->endpoint = endpoint;
  if (!is_valid_utf8(body)) return bad("", "the request body is not valid UTF-8");
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return bad("", std::string("the request body is not valid JSON: ") + e.what());
  }
  try {
    return parse_body(endpoint, j, limits, out);
  } catch (const json::exception& e) {  // not expected: every access is type-checked
    return bad("", std::string("invalid request: ") + e.what());
  }
}

std::optional<ApiError> parse_chat_messages(std::string_view body, std::vector<ChatMessage>* out) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("", "the request body must be a JSON object");
  return parse_messages(j, out);
}

}  // namespace moe::serve
