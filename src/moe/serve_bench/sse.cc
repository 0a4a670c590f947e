#include "moe/serve_bench/sse.h"

#include <nlohmann/json.hpp>

namespace moe::serve_bench {

void SseParser::feed(std::string_view bytes, const EventFn& on_event) {
  for (char c : bytes) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      skip_lf_ = (c == '\r');
      process_line(line_, on_event);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::finish(const EventFn& on_event) {
  if (!line_.empty()) process_line(line_, on_event);
  if (has_data_) on_event(data_);
  line_.clear();
  data_.clear();
  has_data_ = false;
  skip_lf_ = false;
}

void SseParser::process_line(std::string_view line, const EventFn& on_event) {
  if (line.empty()) {
    if (has_data_) on_event(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment (keep-alive)
  std::string_view field = line;
  std::string_view value;
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field != "data") return;
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

namespace {

std::string error_message(const nlohmann::json& err) {
  if (err.is_string()) return err.get<std::string>();
  if (err.is_object()) {
    auto it = err.find("message");
    if (it != err.end() && it->is_string()) return it->get<std::string>();
  }
  return err.dump();
}

std::optional<int> int_field(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int>();
}

std::optional<int> count_field(const nlohmann::json& obj, const char* key) {
  std::optional<int> v = int_field(obj, key);
  if (v && *v < 0) return std::nullopt;
  return v;
}

}  // namespace

Usage parse_usage(const nlohmann::json& usage) {
  Usage u;
  if (!usage.is_object()) return u;
  u.prompt_tokens = int_field(usage, "prompt_tokens");
  u.completion_tokens = int_field(usage, "completion_tokens");
  if (auto d = usage.find("prompt_tokens_details"); d != usage.end() && d->is_object()) {
    u.cached_tokens = count_field(*d, "cached_tokens");
  }
  return u;
}

StatusOr<StreamChunk> parse_stream_chunk(std::string_view data, bool chat) {
  StreamChunk chunk;
  std::string_view trimmed = data;
  while (!trimmed.empty() && (trimmed.back() == ' ' || trimmed.back() == '\t')) trimmed.remove_suffix(1);
  while (!trimmed.empty() && (trimmed.front() == ' ' || trimmed.front() == '\t')) trimmed.remove_prefix(1);
  if (trimmed == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  nlohmann::json j = nlohmann::json::parse(trimmed, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    std::string shown(trimmed.substr(0, 200));
    return invalid_argument("stream chunk is not a JSON object: '" + shown + "'");
  }
  if (auto it = j.find("error"); it != j.end() && !it->is_null()) {
    chunk.error = error_message(*it);
    if (chunk.error.empty()) chunk.error = "error event without a message";
  }
  if (auto it = j.find("choices"); it != j.end() && it->is_array() && !it->empty()) {
    chunk.has_choices = true;
    const nlohmann::json& c0 = (*it)[0];
    if (c0.is_object()) {
      const nlohmann::json* holder = &c0;
      const char* key = "text";
      if (chat) {
        auto d = c0.find("delta");
        holder = (d != c0.end() && d->is_object()) ? &*d : nullptr;
        key = "content";
      }
      if (holder) {
        auto t = holder->find(key);
        if (t != holder->end() && t->is_string()) chunk.text = t->get<std::string>();
      }
      auto fr = c0.find("finish_reason");
      if (fr != c0.end() && fr->is_string()) chunk.finish_reason = fr->get<std::string>();
    }
  }
  if (auto it = j.find("usage"); it != j.end() && it->is_object()) {
    const Usage u = parse_usage(*it);
    chunk.prompt_tokens = u.prompt_tokens;
    chunk.completion_tokens = u.completion_tokens;
    chunk.cached_tokens = u.cached_tokens;
  }
  return chunk;
}

}  // namespace moe::serve_bench
