// Reading tokenizer.json fields with errors that name the file and the field path
// ("<dir>/tokenizer.json: pre_tokenizer.pretokenizers[1].type: ..."). Internal to
// src/moe/model.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "moe/status.h"

namespace moe::hf {

using Json = nlohmann::json;

// `where` is "<file>: <field path>"; the helpers append ".key".
inline std::string field(const std::string& where, const std::string& key) { return where + "." + key; }
inline std::string item(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

inline Status bad(const std::string& where, const std::string& what) { return data_loss(where + ": " + what); }

// j[key] as a string; `fallback` when absent or null, an error when another type.
inline StatusOr<std::string> get_string(const Json& j, const char* key, const std::string& where,
                                        const std::string& fallback = {}) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) return bad(field(where, key), "expected a string, got " + std::string(it->type_name()));
  return it->get<std::string>();
}

inline StatusOr<bool> get_bool(const Json& j, const char* key, const std::string& where, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return bad(field(where, key), "expected a boolean, got " + std::string(it->type_name()));
  return it->get<bool>();
}

inline StatusOr<const Json*> get_array(const Json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return bad(field(where, key), "expected an array");
  return &*it;
}

// j["type"] of a component object; an error naming `where` when j is not an object.
inline StatusOr<std::string> get_type(const Json& j, const std::string& where) {
  if (!j.is_object()) return bad(where, "expected an object, got " + std::string(j.type_name()));
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return bad(field(where, "type"), "missing or not a string");
  return it->get<std::string>();
}

}  // namespace moe::hf
