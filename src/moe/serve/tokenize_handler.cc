#include "moe/serve/tokenize_handler.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "moe/serve/openai_protocol.h"

namespace moe::serve {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HandlerReply error_reply(int status, std::string message, std::string param = "", std::string code = "") {
  ApiError e;
  e.http_status = status;
  e.type = error_type_for_status(status);
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return {status, error_json(e)};
}

HandlerReply status_reply(const Status& st, const std::string& param) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kOutOfRange: return error_reply(400, st.message(), param);
    case StatusCode::kUnavailable: return error_reply(503, st.message());
    case StatusCode::kUnimplemented: return error_reply(501, st.message());
    default: return error_reply(500, st.message());
  }
}

std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// The body as a JSON object, the model check, and optional booleans.
struct Parsed {
  json body;
  std::optional<HandlerReply> error;
};

Parsed parse_body(const TokenizeContext& ctx, std::string_view text) {
  Parsed p;
  p.body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (p.body.is_discarded() || !p.body.is_object()) {
    p.error = error_reply(400, "the request body must be a JSON object");
    return p;
  }
  auto model = p.body.find("model");
  if (model != p.body.end() && !model->is_null()) {
    if (!model->is_string()) {
      p.error = error_reply(400, "'model' must be a string (got " + type_name(*model) + ")", "model");
    } else if (model->get<std::string>() != ctx.served_model_name) {
      p.error = error_reply(404, "The model `" + model->get<std::string>() + "` does not exist.", "model",
                            "model_not_found");
    }
  }
  return p;
}

std::optional<HandlerReply> get_bool(const json& body, const char* key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) {
    return error_reply(400, std::string("'") + key + "' must be a boolean (got " + type_name(*it) + ")", key);
  }
  *out = it->get<bool>();
  return std::nullopt;
}

}  // namespace

HandlerReply handle_tokenize(const TokenizeContext& ctx, std::string_view text) {
  Parsed p = parse_body(ctx, text);
  if (p.error) return *p.error;
  const json& body = p.body;
  const bool has_prompt = body.contains("prompt") && !body["prompt"].is_null();
  const bool has_messages = body.contains("messages") && !body["messages"].is_null();
  if (has_prompt == has_messages) {
    return error_reply(400, has_prompt ? "give either 'prompt' or 'messages', not both"
                                       : "either 'prompt' (a string) or 'messages' (a chat) is required",
                       has_prompt ? "messages" : "prompt");
  }
  bool add_special = !has_messages;  // vLLM: true for a prompt, false for a chat
  bool add_generation_prompt = true, return_strs = false;
  if (auto e = get_bool(body, "add_special_tokens", &add_special)) return *e;
  if (auto e = get_bool(body, "add_generation_prompt", &add_generation_prompt)) return *e;
  if (auto e = get_bool(body, "return_token_strs", &return_strs)) return *e;
  std::string prompt;
  if (has_prompt) {
    if (!body["prompt"].is_string()) {
      return error_reply(400, "'prompt' must be a string (got " + type_name(body["prompt"]) + ")", "prompt");
    }
    if (body.contains("add_generation_prompt")) {
      return error_reply(400, "'add_generation_prompt' applies to 'messages' only", "add_generation_prompt");
    }
    prompt = body["prompt"].get<std::string>();
  } else {
    if (!add_generation_prompt) {
      return error_reply(400, "'add_generation_prompt': false is not supported by this server's chat templates",
                         "add_generation_prompt");
    }
    std::vector<ChatMessage> messages;
    if (auto e = parse_chat_messages(text, &messages)) return {e->http_status, error_json(*e)};
    auto rendered = ctx.chat_template->render(messages);
    if (!rendered.ok()) return error_reply(400, rendered.status().message(), "messages");
    prompt = std::move(rendered).value();
  }
  auto ids = ctx.service->tokenize(prompt, add_special);
  if (!ids.ok()) return status_reply(ids.status(), has_prompt ? "prompt" : "messages");
  json out = {{"count", ids->size()}, {"max_model_len", ctx.max_model_len}, {"tokens", ids.value()}};
  if (return_strs) {
    json strs = json::array();
    for (int id : ids.value()) strs.push_back(ctx.service->token_bytes(id));
    out["token_strs"] = std::move(strs);
  }
  return {200, dump(out)};
}

HandlerReply handle_detokenize(const TokenizeContext& ctx, std::string_view text) {
  Parsed p = parse_body(ctx, text);
  if (p.error) return *p.error;
  auto tokens = p.body.find("tokens");
  if (tokens == p.body.end() || tokens->is_null()) return error_reply(400, "'tokens' is required", "tokens");
  if (!tokens->is_array()) {
    return error_reply(400, "'tokens' must be an array of token ids (got " + type_name(*tokens) + ")", "tokens");
  }
  std::vector<int> ids;
  ids.reserve(tokens->size());
  const int vocab = ctx.service->model_info().vocab_size;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    const std::string param = "tokens[" + std::to_string(i) + "]";
    if (!t.is_number_integer()) {
      return error_reply(400, "'" + param + "' must be an integer token id (got " + type_name(t) + ")", "tokens");
    }
    const int64_t id = t.get<int64_t>();
    if (id < 0 || (vocab > 0 && id >= vocab)) {
      return error_reply(400,
                         "'" + param + "' = " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(vocab) + ")",
                         "tokens");
    }
    ids.push_back(static_cast<int>(id));
  }
  auto decoded = ctx.service->detokenize(ids);
  if (!decoded.ok()) return status_reply(decoded.status(), "tokens");
  return {200, dump({{"prompt", decoded.value()}})};
}

}  // namespace moe::serve
