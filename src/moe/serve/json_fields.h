// Shared helpers of the OpenAI request parser (openai_protocol.cc, openai_params.cc):
// typed field lookups on a JSON body that produce the 400 ApiError naming the field.
// Internal to src/moe/serve. Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "moe/serve/openai_protocol.h"

namespace moe::serve::detail {

using nlohmann::json;

// Output text may end inside a multi-byte character cut by the tokenizer: replace
// such bytes (U+FFFD) rather than throw.
inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

inline json null_or(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

inline ApiError bad(std::string param, std::string message) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

// A JSON value's type in the words of an error message.
inline std::string type_name(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();  // "string", "boolean", "array", "object", "null"
}

inline ApiError wrong_type(const std::string& param, const json& v, const std::string& expected) {
  return bad(param, "'" + param + "' must be " + expected + ", not " + type_name(v));
}

// Field lookup that treats null as absent.
inline const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integer field in [lo, hi]; absent leaves *out unset.
inline std::optional<ApiError> read_int(const json& body, const char* name, int64_t lo, int64_t hi,
                                        std::optional<int64_t>* out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return wrong_type(name, *v, "an integer");
  const bool negative = !v->is_number_unsigned() && v->get<int64_t>() < 0;
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

inline std::optional<ApiError> read_number(const json& body, const char* name, std::optional<double>* out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return wrong_type(name, *v, "a number");
  *out = v->get<double>();
  return std::nullopt;
}

inline std::optional<ApiError> read_bool(const json& body, const char* name, std::optional<bool>* out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return wrong_type(name, *v, "a boolean");
  *out = v->get<bool>();
  return std::nullopt;
}

}  // namespace moe::serve::detail
