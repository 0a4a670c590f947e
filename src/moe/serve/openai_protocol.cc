#include "moe/serve/openai_protocol.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "moe/core/text_format.h"

namespace moe::serve {
namespace {

using nlohmann::json;

// Output text may end inside a multi-byte character cut by the tokenizer: replace
// such bytes (U+FFFD) rather than throw.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json null_or(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

ApiError bad(std::string param, std::string message) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

// A JSON value's type in the words of an error message.
std::string type_name(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();  // "string", "boolean", "array", "object", "null"
}

ApiError wrong_type(const std::string& param, const json& v, const std::string& expected) {
  return bad(param, "'" + param + "' must be " + expected + ", not " + type_name(v));
}

// Field lookup that treats null as absent.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> read_int(const json& body, const char* name, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return wrong_type(name, *v, "an integer");
  const bool negative = v->is_number_integer() && !v->is_number_unsigned() && v->get<int64_t>() < 0;
  if (!negative && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return bad(name, "'" + std::string(name) + "' must be at most " + std::to_string(hi) + " (got " + v->dump() + ")");
  }
  const int64_t x = negative ? v->get<int64_t>() : static_cast<int64_t>(v->get<uint64_t>());
  if (x < lo) {
    return bad(name, "'" + std::string(name) + "' must be at least " + std::to_string(lo) + " (got " + v->dump() + ")");
  }
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> read_number(const json& body, const char* name, std::optional<double>* out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return wrong_type(name, *v, "a number");
  *out = v->get<double>();
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& body, const char* name, std::optional<bool>* out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return wrong_type(name, *v, "a boolean");
  *out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& body, const ProtocolLimits& limits, SeqRequest* seq) {
  const json* p = field(body, "prompt");
  if (!p) return bad("prompt", "'prompt' is required");
  auto check_ids = [&](const json& arr) -> std::optional<ApiError> {
    for (const json& t : arr) {
      if (!t.is_number_integer()) return bad("prompt", "a token-id 'prompt' must hold only integers");
      const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                                                : t.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int>::max() || (limits.vocab_size > 0 && id >= limits.vocab_size)) {
        return bad("prompt", "token id " + t.dump() + " in 'prompt' is outside the vocabulary [0, " +
                                 std::to_string(limits.vocab_size) + ")");
      }
      seq->prompt_token_ids.push_back(static_cast<int>(id));
    }
    return std::nullopt;
  };
  if (p->is_string()) {
    seq->prompt = p->get<std::string>();
  } else if (p->is_array()) {
    if (p->empty()) return bad("prompt", "'prompt' must not be empty");
    const json& first = p->front();
    if (first.is_string()) {
      if (p->size() != 1) {
        return bad("prompt", "'prompt' holds " + std::to_string(p->size()) +
                                 " prompts; this server takes one prompt per request");
      }
      seq->prompt = first.get<std::string>();
    } else if (first.is_number_integer()) {
      if (auto e = check_ids(*p)) return e;
    } else if (first.is_array()) {
      if (p->size() != 1) {
        return bad("prompt", "'prompt' holds " + std::to_string(p->size()) +
                                 " prompts; this server takes one prompt per request");
      }
      if (first.empty()) return bad("prompt", "'prompt' must not be empty");
      if (auto e = check_ids(first)) return e;
    } else {
      return bad("prompt", "'prompt' must be a string, an array of one string, or an array of token ids");
    }
  } else {
    return wrong_type("prompt", *p, "a string or an array");
  }
  if (seq->prompt.empty() && seq->prompt_token_ids.empty()) return bad("prompt", "'prompt' must not be empty");
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

// Fields we know but cannot honour: accepted only at their neutral value.
std::optional<ApiError> check_unsupported(Endpoint endpoint, const json& body) {
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    std::optional<double> v;
    if (auto e = read_number(body, name, &v)) return e;
    if (v && *v != 0.0) {
      return bad(name, "'" + std::string(name) + "' is not supported by this server; omit it or send 0");
    }
  }
  std::optional<int64_t> n;
  if (auto e = read_int(body, "n", INT64_MIN, INT64_MAX, &n)) return e;
  if (n && *n != 1) return bad("n", "only 'n': 1 is supported (one choice per request)");
  if (endpoint == Endpoint::kCompletions) {
    std::optional<bool> echo;
    if (auto e = read_bool(body, "echo", &echo)) return e;
    if (echo && *echo) return bad("echo", "'echo': true is not supported");
    if (field(body, "logprobs")) return bad("logprobs", "'logprobs' is not supported; omit it or send null");
    std::optional<int64_t> best_of;
    if (auto e = read_int(body, "best_of", INT64_MIN, INT64_MAX, &best_of)) return e;
    if (best_of && *best_of != 1) return bad("best_of", "only 'best_of': 1 is supported");
    if (const json* s = field(body, "suffix"); s && !(s->is_string() && s->get<std::string>().empty())) {
      return bad("suffix", "'suffix' is not supported");
    }
  } else {
    std::optional<bool> logprobs;
    if (auto e = read_bool(body, "logprobs", &logprobs)) return e;
    if (logprobs && *logprobs) return bad("logprobs", "'logprobs' is not supported; omit it or send false");
    std::optional<int64_t> top_logprobs;
    if (auto e = read_int(body, "top_logprobs", INT64_MIN, INT64_MAX, &top_logprobs)) return e;
    if (top_logprobs && *top_logprobs != 0) return bad("top_logprobs", "'top_logprobs' is not supported");
    if (const json* t = field(body, "tools"); t && !(t->is_array() && t->empty())) {
      return bad("tools", "'tools' (function calling) is not supported");
    }
  }
  if (const json* lb = field(body, "logit_bias"); lb && !(lb->is_object() && lb->empty())) {
    return bad("logit_bias", "'logit_bias' is not supported");
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
    if (auto e = parse_prompt(body, limits, &out->seq)) return e;
  } else {
    if (auto e = parse_messages(body, &out->messages)) return e;
  }
  if (auto e = parse_max_tokens(endpoint, body, limits, out)) return e;
  if (auto e = parse_sampling(body, &out->seq.sampling)) return e;
  if (auto e = parse_stop(body, &out->seq.stop)) return e;
  if (auto e = check_unsupported(endpoint, body)) return e;
  std::optional<bool> ignore_eos;  // vLLM's extension (benchmarks)
  if (auto e = read_bool(body, "ignore_eos", &ignore_eos)) return e;
  out->seq.ignore_eos = ignore_eos.value_or(false);
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

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json header(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
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
  *out = OpenAiRequest{};
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

std::string completion_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                            const Usage& usage) {
  json j = header(meta, "text_completion");
  j["choices"] = json::array(
      {{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", null_or(finish_reason)}}});
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string chat_completion_json(const ResponseMeta& meta, const std::string& text,
                                 const std::string& finish_reason, const Usage& usage) {
  json j = header(meta, "chat.completion");
  j["choices"] = json::array({{{"index", 0},
                               {"message", {{"role", "assistant"}, {"content", text}}},
                               {"logprobs", nullptr},
                               {"finish_reason", null_or(finish_reason)}}});
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string completion_chunk_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                                  bool include_usage) {
  json j = header(meta, "text_completion");
  j["choices"] = json::array(
      {{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", null_or(finish_reason)}}});
  if (include_usage) j["usage"] = nullptr;
  return dump(j);
}

std::string chat_role_chunk_json(const ResponseMeta& meta, bool include_usage) {
  json j = header(meta, "chat.completion.chunk");
  j["choices"] = json::array({{{"index", 0},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  if (include_usage) j["usage"] = nullptr;
  return dump(j);
}

std::string chat_chunk_json(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                            bool include_usage) {
  json j = header(meta, "chat.completion.chunk");
  json delta = json::object();
  if (!text.empty() || finish_reason.empty()) delta["content"] = text;
  j["choices"] = json::array(
      {{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", null_or(finish_reason)}}});
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

std::optional<ApiError> parse_chat_messages(std::string_view body, std::vector<ChatMessage>* out) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("", "the request body must be a JSON object");
  return parse_messages(j, out);
}

}  // namespace moe::serve
