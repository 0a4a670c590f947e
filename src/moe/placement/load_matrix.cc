// Load files for the planner: {"load": [[...]]}, SGLang's {"logical_count": ...}, and
// `moe generate --stats-out` files (load_matrix.h).
#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "moe/core/mapped_file.h"
#include "moe/core/text_format.h"
#include "moe/placement/load_matrix.h"
#include "moe/stats/expert_load_stats.h"

namespace moe {
namespace {

using nlohmann::json;

// One row of loads: a non-empty list of finite numbers >= 0.
Status read_row(const json& v, const std::string& where, std::vector<double>* out) {
  if (!v.is_array() || v.empty()) return invalid_argument(where + " must be a non-empty list of per-expert numbers");
  out->resize(v.size());
  for (size_t e = 0; e < v.size(); ++e) {
    const std::string at = where + "[" + std::to_string(e) + "]";
    if (!v[e].is_number()) return invalid_argument(at + " is " + v[e].dump() + ", not a number");
    const double x = v[e].get<double>();
    if (!std::isfinite(x) || x < 0) return invalid_argument(at + " is " + format_g(x) + ": loads must be finite and >= 0");
    (*out)[e] = x;
  }
  return ok_status();
}

}  // namespace

StatusOr<LoadMatrix> parse_load_json(const std::string& text, const std::string& source) {
  const std::string src = source + ": ";
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(src + "not valid JSON");
  LoadMatrix m;
  std::vector<std::string> where;  // per row, for messages
  const char* formats =
      "expected {\"load\": [[...], ...]}, SGLang's {\"logical_count\": [[...], ...]} or moe generate --stats-out's "
      "{\"layers\": [{\"tokens_per_expert\": [...]}, ...]}";
  if (!j.is_object()) return invalid_argument(src + "not a JSON object (" + formats + ")");
  if (j.contains("load")) {
    const json& rows = j["load"];
    if (!rows.is_array() || rows.empty()) return invalid_argument(src + "field 'load' must be a non-empty list of rows");
    for (size_t l = 0; l < rows.size(); ++l) {
      std::vector<double> row;
      where.push_back("load[" + std::to_string(l) + "]");
      MOE_RETURN_IF_ERROR(read_row(rows[l], src + where.back(), &row));
      m.load.push_back(std::move(row));
      m.layer_ids.push_back(static_cast<int>(l));
    }
    if (j.contains("layer_ids")) {
      const json& ids = j["layer_ids"];
      if (!ids.is_array() || ids.size() != rows.size()) {
        return invalid_argument(src + "field 'layer_ids' must list one layer id per row of 'load' (" +
                                std::to_string(rows.size()) + ")");
      }
      for (size_t l = 0; l < ids.size(); ++l) {
        if (!ids[l].is_number_integer() || ids[l].get<int64_t>() < 0 || ids[l].get<int64_t>() > (1 << 30)) {
          return invalid_argument(src + "layer_ids[" + std::to_string(l) + "] must be an integer >= 0 (got " +
                                  ids[l].dump() + ")");
        }
        m.layer_ids[l] = static_cast<int>(ids[l].get<int64_t>());
      }
    }
  } else if (j.contains("logical_count")) {
    MOE_ASSIGN_OR_RETURN(SglangLogicalCount sg, parse_sglang_logical_count(j, source));
    for (size_t l = 0; l < sg.layer_ids.size(); ++l) {
      where.push_back("logical_count[" + std::to_string(sg.layer_ids[l]) + "]");
      m.load.emplace_back(sg.counts[l].begin(), sg.counts[l].end());
    }
    m.layer_ids = std::move(sg.layer_ids);
    m.skipped_zero_layers = std::move(sg.zero_layers);
  } else if (j.contains("layers")) {
    const json& layers = j["layers"];
    if (!layers.is_array() || layers.empty()) return invalid_argument(src + "field 'layers' must be a non-empty list");
    for (size_t l = 0; l < layers.size(); ++l) {
      const std::string w = "layers[" + std::to_string(l) + "]";
      const json& lj = layers[l];
      if (!lj.is_object() || !lj.contains("tokens_per_expert")) {
        return invalid_argument(src + w + ": required field 'tokens_per_expert' is missing");
      }
      int id = static_cast<int>(l);
      if (lj.contains("layer")) {
        if (!lj["layer"].is_number_integer() || lj["layer"].get<int64_t>() < 0 || lj["layer"].get<int64_t>() > (1 << 30)) {
          return invalid_argument(src + w + ".layer must be an integer >= 0 (got " + lj["layer"].dump() + ")");
        }
        id = static_cast<int>(lj["layer"].get<int64_t>());
      }
      std::vector<double> row;
      where.push_back(w + ".tokens_per_expert");
      MOE_RETURN_IF_ERROR(read_row(lj["tokens_per_expert"], src + where.back(), &row));
      m.load.push_back(std::move(row));
      m.layer_ids.push_back(id);
    }
  } else {
    return invalid_argument(src + "no 'load', 'logical_count' or 'layers' field (" + formats + ")");
  }
  for (size_t l = 1; l < m.load.size(); ++l) {
    if (m.load[l].size() != m.load[0].size()) {
      return invalid_argument(src + where[l] + " has " + std::to_string(m.load[l].size()) + " experts, expected " +
                              std::to_string(m.load[0].size()) + " (as " + where[0] + ")");
    }
  }
  std::set<int> seen;
  for (size_t l = 0; l < m.layer_ids.size(); ++l) {
    if (!seen.insert(m.layer_ids[l]).second) {
      return invalid_argument(src + "layer " + std::to_string(m.layer_ids[l]) + " appears twice (" + where[l] + ")");
    }
  }
  return m;
}

StatusOr<LoadMatrix> read_load_file(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_load_json(text, path);
}

}  // namespace moe
