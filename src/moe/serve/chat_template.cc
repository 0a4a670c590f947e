#include "moe/serve/chat_template.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "moe/core/logging.h"
#include "moe/jinja/template.h"

namespace moe::serve {
namespace {

using nlohmann::json;

std::string replace_all(const std::string& pattern, const std::string& content) {
  static const std::string kHole = "{content}";
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t hit = pattern.find(kHole, pos);
    if (hit == std::string::npos) break;
    out.append(pattern, pos, hit - pos);
    out += content;
    pos = hit + kHole.size();
  }
  out.append(pattern, pos, std::string::npos);
  return out;
}

// System messages folded into the next user message ("{system}\n\n{user}"); the
// result holds only user and assistant turns.
std::vector<ChatMessage> fold_system(const std::vector<ChatMessage>& messages) {
  std::vector<ChatMessage> out;
  std::string pending;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      pending += (pending.empty() ? "" : "\n\n") + m.content;
    } else if (m.role == "user" && !pending.empty()) {
      out.push_back({"user", pending + "\n\n" + m.content});
      pending.clear();
    } else {
      out.push_back(m);
    }
  }
  if (!pending.empty()) out.push_back({"user", pending});
  return out;
}

Status not_alternating(size_t index) {
  return invalid_argument("messages: the mistral chat template needs user and assistant turns to alternate, "
                          "starting with user (system messages go before a user turn); turn " +
                          std::to_string(index) + " breaks this");
}

std::string template_text(const json& config) {
  auto it = config.find("chat_template");
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {  // [{"name": "default", "template": "..."}, ...]
    std::string first;
    for (const json& t : *it) {
      if (!t.is_object() || !t.contains("template") || !t["template"].is_string()) continue;
      if (first.empty()) first = t["template"].get<std::string>();
      if (t.value("name", "") == "default") return t["template"].get<std::string>();
    }
    return first;
  }
  return "";
}

// A special token in tokenizer_config.json: a string, or an AddedToken {"content": ...}.
std::string special_token(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return "";
}

bool read_text(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// `<model_dir>/tokenizer_config.json` parsed; null when absent or unreadable (logged).
json read_tokenizer_config(const std::string& model_dir) {
  if (model_dir.empty()) return nullptr;
  const std::string path = model_dir + "/tokenizer_config.json";
  std::string text;
  if (!read_text(path, &text)) return nullptr;
  try {
    json config = json::parse(text);
    if (config.is_object()) return config;
    MOE_LOG_WARN("{}: not a JSON object; ignored for the chat template", path);
  } catch (const json::exception& e) {
    MOE_LOG_WARN("{}: not valid JSON ({}); ignored for the chat template", path, e.what());
  }
  return nullptr;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ChatTemplate::ChatTemplate() = default;

StatusOr<ChatTemplate> ChatTemplate::from_jinja(const std::string& text, const std::string& name,
                                                const std::string& bos_token, const std::string& eos_token) {
  auto parsed = jinja::Template::parse(text);
  if (!parsed.ok()) return invalid_argument("chat template " + name + ": " + parsed.status().message());
  ChatTemplate t;
  t.kind_ = Kind::kJinja;
  t.name_ = name;
  t.jinja_ = std::make_shared<const jinja::Template>(std::move(parsed).value());
  t.bos_token_ = bos_token;
  t.eos_token_ = eos_token;
  return t;
}

StatusOr<ChatTemplate> ChatTemplate::builtin(const std::string& name) {
  ChatTemplate t;
  if (name == "plain") {
    t.kind_ = Kind::kPlain;
  } else if (name == "chatml") {
    t.kind_ = Kind::kChatml;
  } else if (name == "mistral") {
    t.kind_ = Kind::kMistral;
  } else {
    return invalid_argument("unknown chat template '" + name + "' (built in: chatml, mistral, plain; or a file)");
  }
  t.name_ = name;
  return t;
}

StatusOr<ChatTemplate> ChatTemplate::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("chat template file " + path + " cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    return invalid_argument("chat template file " + path + " is not valid JSON: " + e.what());
  }
  if (!j.is_object()) return invalid_argument("chat template file " + path + ": expected a JSON object");
  ChatTemplate t;
  t.kind_ = Kind::kFile;
  t.name_ = path;
  auto read = [&](const char* key, bool required, std::string* out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) {
      return required ? invalid_argument("chat template file " + path + ": missing \"" + key + "\"") : ok_status();
    }
    if (!it->is_string()) return invalid_argument("chat template file " + path + ": \"" + key + "\" must be a string");
    *out = it->get<std::string>();
    return ok_status();
  };
  for (auto [key, required, out] : {std::tuple{"prefix", false, &t.prefix_}, std::tuple{"user", true, &t.user_},
                                    std::tuple{"assistant", true, &t.assistant_},
                                    std::tuple{"generation_prompt", false, &t.generation_prompt_}}) {
    Status st = read(key, required, out);
    if (!st.ok()) return st;
  }
  t.has_system_ = j.contains("system");
  if (t.has_system_) {
    Status st = read("system", true, &t.system_);
    if (!st.ok()) return st;
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "prefix" && key != "system" && key != "user" && key != "assistant" && key != "generation_prompt") {
      return invalid_argument("chat template file " + path + ": unknown key \"" + key +
                              "\" (known: prefix, system, user, assistant, generation_prompt)");
    }
  }
  return t;
}

StatusOr<ChatTemplate> ChatTemplate::select(const std::string& name_or_path, const std::string& model_dir,
                                            const std::string& model_type) {
  const json config = read_tokenizer_config(model_dir);
  const std::string bos = config.is_object() ? special_token(config, "bos_token") : "";
  const std::string eos = config.is_object() ? special_token(config, "eos_token") : "";
  if (!name_or_path.empty()) {
    if (name_or_path == "plain" || name_or_path == "chatml" || name_or_path == "mistral") return builtin(name_or_path);
    std::string text;
    if (!read_text(name_or_path, &text)) {
      return invalid_argument("chat template '" + name_or_path +
                              "' is neither a built-in template (chatml, mistral, plain) nor a readable file");
    }
    if (ends_with(name_or_path, ".json")) return from_file(name_or_path);
    if (!ends_with(name_or_path, ".jinja")) {
      const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (j.is_object()) return from_file(name_or_path);
    }
    return from_jinja(text, name_or_path, bos, eos);
  }
  if (config.is_object()) {
    const std::string text = template_text(config);
    if (!text.empty()) return from_jinja(text, model_dir + "/tokenizer_config.json", bos, eos);
  }
  if (model_type == "qwen2_moe" || model_type == "qwen3_moe") return builtin("chatml");
  return builtin("plain");
}

StatusOr<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  if (messages.empty()) return invalid_argument("messages: must not be empty");
  std::string out;
  switch (kind_) {
    case Kind::kPlain:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i > 0) out += "\n\n";
        out += messages[i].content;
      }
      return out;
    case Kind::kChatml:
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case Kind::kMistral: {
      const std::vector<ChatMessage> turns = fold_system(messages);
      for (size_t i = 0; i < turns.size(); ++i) {
        const bool user_turn = i % 2 == 0;
        if ((turns[i].role == "user") != user_turn) return not_alternating(i);
        out += user_turn ? "[INST] " + turns[i].content + " [/INST]" : turns[i].content + "</s>";
      }
      return out;
    }
    case Kind::kJinja: {
      json msgs = json::array();
      for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
      const json context = {{"messages", std::move(msgs)},
                            {"add_generation_prompt", true},
                            {"bos_token", bos_token_},
                            {"eos_token", eos_token_}};
      auto rendered = jinja_->render(context);
      if (!rendered.ok()) {
        return invalid_argument("messages: the chat template (" + name_ + ") failed: " + rendered.status().message());
      }
      return rendered;
    }
    case Kind::kFile: {
      out = prefix_;
      const std::vector<ChatMessage> turns = has_system_ ? messages : fold_system(messages);
      for (const ChatMessage& m : turns) {
        const std::string& pattern = m.role == "system" ? system_ : m.role == "user" ? user_ : assistant_;
        out += replace_all(pattern, m.content);
      }
      return out + generation_prompt_;
    }
  }
  return out;
}

}  // namespace moe::serve
