#include "moe/config/config_file.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace moe::config {
namespace {

Status error_at(const std::string& source, int line, const std::string& key, const std::string& message) {
  return invalid_argument(source + ":" + std::to_string(line) + ": " + key + ": " + message);
}

std::vector<std::string> split_choices(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t bar = s.find('|', start);
    out.emplace_back(s.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start));
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  return out;
}

bool parse_bool(const std::string& t, bool* out) {
  if (t == "true" || t == "True" || t == "TRUE" || t == "yes" || t == "on") return *out = true, true;
  if (t == "false" || t == "False" || t == "FALSE" || t == "no" || t == "off") return *out = false, true;
  return false;
}

bool parse_number(const std::string& t, double* out) {
  if (t.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

std::string format_number(double v) {
  std::ostringstream ss;
  ss << v;
  return ss.str();
}

// Checks one scalar against its key and fills v.flag_value.
Status check_value(const std::string& source, const ConfigKey& k, ConfigValue& v) {
  const std::string key(k.key);
  switch (k.type) {
    case ConfigType::kBool: {
      bool b = false;
      if (!parse_bool(v.text, &b)) return error_at(source, v.line, key, "expected a boolean (true or false), got '" + v.text + "'");
      const std::vector<std::string> spell = split_choices(k.choices.empty() ? "true|false" : k.choices);
      v.flag_value = b ? spell[0] : spell[1];
      return Status();
    }
    case ConfigType::kInt:
    case ConfigType::kNumber: {
      double d = 0;
      if (!parse_number(v.text, &d)) {
        return error_at(source, v.line, key, std::string("expected ") + (k.type == ConfigType::kInt ? "an integer" : "a number") +
                                                 ", got '" + v.text + "'");
      }
      if (k.type == ConfigType::kInt && (d != std::floor(d) || v.text.find_first_of(".eE") != std::string::npos)) {
        return error_at(source, v.line, key, "expected an integer, got '" + v.text + "'");
      }
      if (d < k.min || d > k.max) {
        std::string range = k.max >= 1e299 ? ">= " + format_number(k.min)
                            : k.min <= -1e299 ? "<= " + format_number(k.max)
                                              : "in [" + format_number(k.min) + ", " + format_number(k.max) + "]";
        if (k.min > 0 && k.min < 1e-6) range = k.max >= 1e5 ? "> 0" : "in (0, " + format_number(k.max) + "]";
        return error_at(source, v.line, key, "must be " + range + " (got " + v.text + ")");
      }
      v.flag_value = v.text;
      return Status();
    }
    case ConfigType::kEnum: {
      for (const std::string& c : split_choices(k.choices)) {
        if (c == v.text) {
          v.flag_value = v.text;
          return Status();
        }
      }
      std::string list;
      for (const std::string& c : split_choices(k.choices)) list += (list.empty() ? "" : ", ") + c;
      return error_at(source, v.line, key, "'" + v.text + "' is not one of " + list);
    }
    case ConfigType::kString:
      if (v.text.empty()) return error_at(source, v.line, key, "is empty");
      v.flag_value = v.text;
      return Status();
  }
  return Status();
}

}  // namespace

const ConfigValue* ConfigFile::find(std::string_view key) const {
  for (const ConfigValue& v : values) {
    if (v.key->key == key) return &v;
  }
  return nullptr;
}

StatusOr<ConfigFile> parse_config(const std::string& yaml_text, const std::string& source) {
  ConfigFile file;
  file.path = source;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return invalid_argument(source + ":" + std::to_string(e.mark.line + 1) + ":" +
                                   std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  }
  if (root.IsNull()) return file;  // an empty file sets nothing
  if (!root.IsMap()) {
    return invalid_argument(source + ":" + std::to_string(root.Mark().line + 1) +
                                   ": expected a mapping of sections (model:, router:, ...) at the top level");
  }
  std::set<std::string> seen;
  for (const auto& section : root) {
    const std::string sname = section.first.as<std::string>("");
    const int sline = section.first.Mark().line + 1;
    if (!section.second.IsMap()) {
      bool is_section = false;
      for (const ConfigKey& k : config_keys()) is_section |= k.key.substr(0, k.key.find('.')) == sname;
      if (is_section) return error_at(source, sline, sname, "expected a section (a mapping of keys)");
      // A key at the top level ("k: 8") or an unknown section: name the nearest key.
      const std::string near = closest_config_key(sname);
      return error_at(source, sline, sname,
                      "unknown top-level key" + (near.empty() ? std::string() : " (did you mean " + near + "?)"));
    }
    for (const auto& item : section.second) {
      const std::string name = item.first.as<std::string>("");
      const std::string full = sname + "." + name;
      ConfigValue v;
      v.line = item.first.Mark().line + 1;
      v.key = find_config_key(full);
      if (v.key == nullptr) {
        const std::string near = closest_config_key(full);
        return error_at(source, v.line, full, "unknown key" + (near.empty() ? std::string() : " (did you mean " + near + "?)"));
      }
      if (!seen.insert(full).second) return error_at(source, v.line, full, "given twice");
      if (item.second.IsNull()) return error_at(source, v.line, full, "has no value");
      if (!item.second.IsScalar()) {
        return error_at(source, v.line, full, std::string("expected a ") + config_type_name(v.key->type) +
                                                  (v.key->type == ConfigType::kEnum ? " " + std::string(v.key->choices) : "") +
                                                  ", got a " + (item.second.IsMap() ? "mapping" : "list"));
      }
      v.text = item.second.Scalar();
      if (Status st = check_value(source, *v.key, v); !st.ok()) return st;
      v.flag = std::string(v.key->flag);
      file.values.push_back(std::move(v));
    }
  }
  if (Status st = check_config(file); !st.ok()) return st;
  return file;
}

StatusOr<ConfigFile> load_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("--config " + path + ": cannot open the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

}  // namespace moe::config
