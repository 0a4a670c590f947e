#include "moe/constrain/json_schema_compiler.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

namespace moe {
namespace {

using json = nlohmann::json;

const std::string kWhat = "response_format.json_schema";

const std::set<std::string> kAnnotations = {"title",      "description", "default",  "examples", "$schema", "$id",
                                             "$comment",   "deprecated",  "readOnly", "writeOnly", "$defs",  "definitions"};
const std::set<std::string> kKeywords = {"type",     "properties", "required", "additionalProperties", "items", "minItems",
                                         "maxItems", "enum",       "const",    "anyOf",                "$ref"};
const std::set<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};
const std::set<std::string> kObjectKeywords = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayKeywords = {"items", "minItems", "maxItems"};

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& doc) : doc_(doc) {}

  StatusOr<int> compile(const json& s, const std::string& path, int depth) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) return error("the schema false (accepts nothing) at " + path);
      return any();
    }
    if (!s.is_object()) return error("a schema must be an object or a boolean at " + path);
    for (const auto& [key, value] : s.items()) {
      (void)value;
      if (kAnnotations.count(key) == 0 && kKeywords.count(key) == 0) {
        return error("unsupported keyword '" + key + "' at " + path);
      }
    }
    if (s.contains("$ref")) return compile_ref(s, path, depth);
    if (s.contains("anyOf")) return compile_any_of(s, path, depth);
    if (s.contains("enum") || s.contains("const")) return compile_enum(s, path);
    return compile_types(s, path, depth);
  }

  JsonGrammar take() { return std::move(g_); }

 private:
  Status error(const std::string& message) const { return invalid_argument(kWhat + ": " + message); }

  StatusOr<int> add(JsonNode node, const std::string& path) {
    if (static_cast<int>(g_.nodes.size()) >= kMaxSchemaNodes) {
      return error("too complex: more than " + std::to_string(kMaxSchemaNodes) + " grammar nodes (the limit) at " + path);
    }
    return g_.add(std::move(node));
  }

  int any() {
    if (any_ < 0) any_ = add_any_value(g_);
    return any_;
  }

  // Keywords besides `allowed` and the annotations are refused next to `keyword`.
  Status only_with(const json& s, const std::string& keyword, const std::set<std::string>& allowed,
                   const std::string& path) const {
    for (const auto& [key, value] : s.items()) {
      (void)value;
      if (key != keyword && kAnnotations.count(key) == 0 && allowed.count(key) == 0) {
        return error("keyword '" + key + "' together with '" + keyword + "' is not supported at " + path);
      }
    }
    return ok_status();
  }

  StatusOr<int> compile_ref(const json& s, const std::string& path, int depth) {
    MOE_RETURN_IF_ERROR(only_with(s, "$ref", {}, path));
    if (!s["$ref"].is_string()) return error("'$ref' must be a string at " + path);
    const std::string ref = s["$ref"].get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') {
      return error("'$ref' \"" + ref + "\" at " + path + " is not local (only \"#/...\" references are supported)");
    }
    const json* target = nullptr;
    try {
      const json::json_pointer pointer(ref.substr(1));
      if (doc_.contains(pointer)) target = &doc_.at(pointer);
    } catch (const json::exception& e) {
      return error("'$ref' \"" + ref + "\" at " + path + " is not a JSON pointer: " + e.what());
    }
    if (target == nullptr) return error("'$ref' \"" + ref + "\" at " + path + " points to nothing in the schema");
    MOE_ASSIGN_OR_RETURN(const int id, add(JsonNode{}, path));  // a union of one: the target
    refs_[ref] = id;
    MOE_ASSIGN_OR_RETURN(const int body, compile(*target, ref, depth));
    g_.nodes[static_cast<size_t>(id)].alternatives = {body};
    return id;
  }

  StatusOr<int> compile_any_of(const json& s, const std::string& path, int depth) {
    MOE_RETURN_IF_ERROR(only_with(s, "anyOf", {}, path));
    const json& alts = s["anyOf"];
    if (!alts.is_array() || alts.empty()) return error("'anyOf' must be a non-empty array at " + path);
    JsonNode u;
    for (size_t i = 0; i < alts.size(); ++i) {
      MOE_ASSIGN_OR_RETURN(const int alt, compile(alts[i], path + "/anyOf/" + std::to_string(i), depth));
      u.alternatives.push_back(alt);
    }
    return add(std::move(u), path);
  }

  static bool has_type(const json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") {
      return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    }
    if (t == "boolean") return v.is_boolean();
    return v.is_null();
  }

  StatusOr<std::vector<std::string>> types(const json& s, const std::string& path) const {
    std::vector<std::string> out;
    if (!s.contains("type")) return out;
    const json& t = s["type"];
    if (t.is_string()) {
      out.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (const json& e : t) {
        if (!e.is_string()) return error("'type' must be a string or a list of strings at " + path);
        out.push_back(e.get<std::string>());
      }
    } else {
      return error("'type' must be a string or a non-empty list of strings at " + path);
    }
    for (const std::string& name : out) {
      if (kTypes.count(name) == 0) return error("unknown type \"" + name + "\" at " + path);
    }
    return out;
  }

  StatusOr<int> compile_enum(const json& s, const std::string& path) {
    const bool is_const = s.contains("const");
    if (is_const && s.contains("enum")) return error("both 'enum' and 'const' at " + path);
    const std::string keyword = is_const ? "const" : "enum";
    MOE_RETURN_IF_ERROR(only_with(s, keyword, {"type"}, path));
    MOE_ASSIGN_OR_RETURN(const std::vector<std::string> type_list, types(s, path));
    json values = is_const ? json::array({s["const"]}) : s["enum"];
    if (!values.is_array() || values.empty()) return error("'enum' must be a non-empty array at " + path);
    if (static_cast<int>(values.size()) > kMaxEnumValues) {
      return error("too complex: 'enum' has " + std::to_string(values.size()) + " values, more than " +
                   std::to_string(kMaxEnumValues) + " (the limit) at " + path);
    }
    JsonNode u;
    for (const json& v : values) {
      bool typed = type_list.empty();
      for (const std::string& t : type_list) typed = typed || has_type(v, t);
      if (!typed) continue;
      JsonNode lit;
      lit.kind = JsonNodeKind::kLiteral;
      lit.text = v.dump();
      if (lit.text.size() > kMaxLiteralBytes) {
        return error("too complex: a '" + keyword + "' value is " + std::to_string(lit.text.size()) +
                     " bytes as JSON, more than " + std::to_string(kMaxLiteralBytes) + " (the limit) at " + path);
      }
      MOE_ASSIGN_OR_RETURN(const int id, add(std::move(lit), path));
      u.alternatives.push_back(id);
    }
    if (u.alternatives.empty()) return error("no '" + keyword + "' value has the schema's type at " + path);
    return add(std::move(u), path);
  }

  static bool has_any(const json& s, const std::set<std::string>& keys) {
    for (const std::string& k : keys) {
      if (s.contains(k)) return true;
    }
    return false;
  }

  StatusOr<int> compile_types(const json& s, const std::string& path, int depth) {
    MOE_ASSIGN_OR_RETURN(std::vector<std::string> type_list, types(s, path));
    const bool object_kw = has_any(s, kObjectKeywords), array_kw = has_any(s, kArrayKeywords);
    if (type_list.empty()) {
      if (object_kw && array_kw) return error("object and array keywords without a 'type' at " + path);
      if (object_kw) type_list.push_back("object");
      else if (array_kw) type_list.push_back("array");
      else return any();
    }
    auto allows = [&](const std::string& t) { return std::find(type_list.begin(), type_list.end(), t) != type_list.end(); };
    for (const std::string& k : kObjectKeywords) {
      if (s.contains(k) && !allows("object")) return error("keyword '" + k + "' at " + path + " but 'type' has no object");
    }
    for (const std::string& k : kArrayKeywords) {
      if (s.contains(k) && !allows("array")) return error("keyword '" + k + "' at " + path + " but 'type' has no array");
    }
    JsonNode u;
    for (const std::string& t : type_list) {
      if (t == "object") {
        MOE_ASSIGN_OR_RETURN(const int id, compile_object(s, path, depth));
        u.alternatives.push_back(id);
      } else if (t == "array") {
        MOE_ASSIGN_OR_RETURN(const int id, compile_array(s, path, depth));
        u.alternatives.push_back(id);
      } else if (t == "boolean") {
        MOE_ASSIGN_OR_RETURN(const int yes, literal("true", path));
        MOE_ASSIGN_OR_RETURN(const int no, literal("false", path));
        u.alternatives.push_back(yes);
        u.alternatives.push_back(no);
      } else if (t == "null") {
        MOE_ASSIGN_OR_RETURN(const int id, literal("null", path));
        u.alternatives.push_back(id);
      } else {
        JsonNode n;
        n.kind = t == "string" ? JsonNodeKind::kString : t == "number" ? JsonNodeKind::kNumber : JsonNodeKind::kInteger;
        MOE_ASSIGN_OR_RETURN(const int id, add(std::move(n), path));
        u.alternatives.push_back(id);
      }
    }
    if (u.alternatives.size() == 1) return u.alternatives[0];
    return add(std::move(u), path);
  }

  StatusOr<int> literal(const std::string& text, const std::string& path) {
    JsonNode n;
    n.kind = JsonNodeKind::kLiteral;
    n.text = text;
    return add(std::move(n), path);
  }

  Status check_depth(int depth, const std::string& path) const {
    if (depth >= kMaxJsonDepth) {
      return error("too complex: objects and arrays nested deeper than " + std::to_string(kMaxJsonDepth) +
                   " (the limit) at " + path);
    }
    return ok_status();
  }

  StatusOr<int> compile_object(const json& s, const std::string& path, int depth) {
    MOE_RETURN_IF_ERROR(check_depth(depth, path));
    JsonNode obj;
    obj.kind = JsonNodeKind::kObject;
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) return error("'required' must be an array of strings at " + path);
      for (const json& name : r) {
        if (!name.is_string()) return error("'required' must be an array of strings at " + path);
        required.insert(name.get<std::string>());
      }
    }
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return error("'properties' must be an object at " + path);
    if (static_cast<int>(props.size()) > kMaxSchemaProperties) {
      return error("too complex: " + std::to_string(props.size()) + " properties, more than " +
                   std::to_string(kMaxSchemaProperties) + " (the limit) at " + path);
    }
    for (const std::string& name : required) {
      if (!props.contains(name)) {
        return error("required property '" + name + "' is not in 'properties' at " + path +
                     " (only listed properties are generated)");
      }
    }
    // nlohmann's object is ordered by key; the schema's order is its text's.
    for (const std::string& name : key_order(props)) {
      const std::string sub = path + "/properties/" + escape_pointer(name);
      MOE_ASSIGN_OR_RETURN(const int value, compile(props[name], sub, depth + 1));
      JsonNode key;
      key.kind = JsonNodeKind::kLiteral;
      key.text = json(name).dump();
      key.property = static_cast<int>(obj.properties.size());
      MOE_ASSIGN_OR_RETURN(const int key_id, add(std::move(key), sub));
      obj.properties.push_back({key_id, value, required.count(name) > 0});
    }
    if (s.contains("additionalProperties")) {
      const json& ap = s["additionalProperties"];
      const std::string sub = path + "/additionalProperties";
      if (ap.is_object() || (ap.is_boolean() && ap.get<bool>())) {
        if (obj.properties.empty()) {
          MOE_ASSIGN_OR_RETURN(obj.additional, compile(ap, sub, depth + 1));
        } else if (ap.is_object()) {
          return error("'additionalProperties' as a schema together with 'properties' is not supported at " + path);
        }
      } else if (!ap.is_boolean()) {
        return error("'additionalProperties' must be a boolean or a schema at " + path);
      }
    } else if (obj.properties.empty()) {
      obj.additional = any();
    }
    return add(std::move(obj), path);
  }

  StatusOr<int> compile_array(const json& s, const std::string& path, int depth) {
    MOE_RETURN_IF_ERROR(check_depth(depth, path));
    JsonNode arr;
    arr.kind = JsonNodeKind::kArray;
    if (s.contains("items")) {
      if (s["items"].is_array()) return error("'items' as a list (tuple validation) is not supported at " + path);
      MOE_ASSIGN_OR_RETURN(arr.items, compile(s["items"], path + "/items", depth + 1));
    } else {
      arr.items = any();
    }
    for (const char* key : {"minItems", "maxItems"}) {
      if (!s.contains(key)) continue;
      const json& v = s[key];
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
        return error("'" + std::string(key) + "' must be a non-negative integer at " + path);
      }
      const int64_t n = std::min<int64_t>(v.get<int64_t>(), INT_MAX);
      (std::string(key) == "minItems" ? arr.min_items : arr.max_items) = static_cast<int>(n);
    }
    if (arr.min_items > arr.max_items) {
      return error("'minItems' (" + std::to_string(arr.min_items) + ") > 'maxItems' (" +
                   std::to_string(arr.max_items) + ") at " + path);
    }
    return add(std::move(arr), path);
  }

  // The keys of `props` in the order the schema text lists them.
  std::vector<std::string> key_order(const json& props) const {
    auto it = order_.find(&props);
    if (it != order_.end()) return it->second;
    std::vector<std::string> keys;
    for (const auto& [k, v] : props.items()) {
      (void)v;
      keys.push_back(k);
    }
    return keys;
  }

 public:
  // Key order per object of the parsed document (filled by the parser callback).
  std::map<const json*, std::vector<std::string>> order_;

 private:
  const json& doc_;
  JsonGrammar g_;
  std::map<std::string, int> refs_;
  int any_ = -1;
};

}  // namespace

StatusOr<JsonGrammar> compile_json_schema(const std::string& schema_text) {
  nlohmann::ordered_json ordered;
  json doc;
  try {
    ordered = nlohmann::ordered_json::parse(schema_text);
    doc = json::parse(schema_text);
  } catch (const std::exception& e) {
    return invalid_argument(kWhat + ": not valid JSON: " + e.what());
  }
  SchemaCompiler compiler(doc);
  // Record the text order of every "properties" object (by its place in `doc`).
  std::function<void(const nlohmann::ordered_json&, const json&)> record = [&](const nlohmann::ordered_json& o,
                                                                              const json& d) {
    if (o.is_object()) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : o.items()) {
        keys.push_back(k);
        record(v, d.at(k));
      }
      compiler.order_[&d] = std::move(keys);
    } else if (o.is_array()) {
      for (size_t i = 0; i < o.size(); ++i) record(o[i], d.at(i));
    }
  };
  record(ordered, doc);
  MOE_ASSIGN_OR_RETURN(const int root, compiler.compile(doc, "#", 0));
  JsonGrammar g = compiler.take();
  g.root = root;
  MOE_RETURN_IF_ERROR(finalize_json_grammar(g, kWhat));
  return g;
}

StatusOr<std::shared_ptr<const JsonGrammar>> compile_response_format(const std::string& response_format,
                                                                     const std::string& json_schema) {
  if (response_format != "json_schema" && !json_schema.empty()) {
    return invalid_argument("response_format.json_schema given with response_format \"" + response_format +
                            "\" (it needs \"json_schema\")");
  }
  if (response_format == "text") return std::shared_ptr<const JsonGrammar>();
  if (response_format == "json_object") return std::make_shared<const JsonGrammar>(json_object_grammar());
  if (response_format == "json_schema") {
    if (json_schema.empty()) return invalid_argument(kWhat + ": missing (response_format is \"json_schema\")");
    MOE_ASSIGN_OR_RETURN(JsonGrammar g, compile_json_schema(json_schema));
    return std::make_shared<const JsonGrammar>(std::move(g));
  }
  return invalid_argument("response_format must be \"text\", \"json_object\" or \"json_schema\" (got \"" +
                          response_format + "\")");
}

}  // namespace moe
