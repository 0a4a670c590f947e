#include "moe/stats/expert_load_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "moe/core/atomic_file.h"
#include "moe/core/check.h"
#include "moe/core/mapped_file.h"

namespace moe {
namespace {

using nlohmann::json;

// A count: a non-negative integer, or a float with an integral value (SGLang writes
// 807392.0), that fits in int64.
// A JSON value for an error message: scalars as written (long strings cut), arrays and
// objects by kind and size (dumping them could be huge, or recurse as deep as the input).
std::string preview(const json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object()) return "an object";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

bool read_count(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = i;
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 is exactly representable; anything below it converts without overflow.
    if (!(d >= 0.0) || !(d < 9223372036854775808.0) || d != std::floor(d)) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

Status bad_count(const std::string& where, const json& v) {
  return invalid_argument(where + " must be a non-negative integer (got " + preview(v) + ")");
}

// `where` is "<source>: layers[3].tokens_per_expert" or the like.
Status read_count_row(const json& row, const std::string& where, std::vector<int64_t>* out) {
  if (!row.is_array()) return invalid_argument(where + " must be an array of counts (got " + preview(row) + ")");
  if (row.empty()) return invalid_argument(where + " is empty (need one count per expert)");
  out->assign(row.size(), 0);
  int64_t sum = 0;
  for (size_t e = 0; e < row.size(); ++e) {
    const std::string w = where + "[" + std::to_string(e) + "]";
    if (!read_count(row[e], &(*out)[e])) return bad_count(w, row[e]);
    if (__builtin_add_overflow(sum, (*out)[e], &sum)) {
      return invalid_argument(where + ": the counts sum past the int64 range");
    }
  }
  return ok_status();
}

Status check_row_length(size_t got, size_t want, const std::string& where, const std::string& first,
                        const char* why = "every layer needs one count per expert") {
  if (got == want) return ok_status();
  return invalid_argument(where + " has " + std::to_string(got) + " entries but " + first + " has " +
                          std::to_string(want) + " (" + why + ")");
}

Status read_optional_count(const json& obj, const char* field, const std::string& where, int64_t* out) {
  if (!obj.contains(field) || obj[field].is_null()) return ok_status();
  if (!read_count(obj[field], out)) return bad_count(where + "." + field, obj[field]);
  return ok_status();
}

}  // namespace

StatusOr<ExpertLoadStats> ExpertLoadStats::create(std::vector<int> moe_layer_ids, int num_experts, double ema_decay) {
  if (moe_layer_ids.empty()) return invalid_argument("ExpertLoadStats: the list of MoE layer ids is empty");
  if (num_experts < 1) {
    return invalid_argument("ExpertLoadStats: num_experts must be >= 1 (got " + std::to_string(num_experts) + ")");
  }
  if (!(ema_decay >= 0.0 && ema_decay < 1.0)) {
    return invalid_argument("ExpertLoadStats: ema_decay must be in [0, 1) (got " + std::to_string(ema_decay) + ")");
  }
  std::sort(moe_layer_ids.begin(), moe_layer_ids.end());
  for (size_t i = 0; i < moe_layer_ids.size(); ++i) {
    if (moe_layer_ids[i] < 0) {
      return invalid_argument("ExpertLoadStats: MoE layer id " + std::to_string(moe_layer_ids[i]) + " is negative");
    }
    if (i > 0 && moe_layer_ids[i] == moe_layer_ids[i - 1]) {
      return invalid_argument("ExpertLoadStats: MoE layer id " + std::to_string(moe_layer_ids[i]) + " is listed twice");
    }
  }
  ExpertLoadStats s;
  s.layer_ids_ = std::move(moe_layer_ids);
  s.num_experts_ = num_experts;
  s.ema_decay_ = ema_decay;
  s.layers_.resize(s.layer_ids_.size());
  for (Layer& l : s.layers_) {
    l.tokens.assign(static_cast<size_t>(num_experts), 0);
    l.ema.assign(static_cast<size_t>(num_experts), 0.0);
    l.degraded_per_expert.assign(static_cast<size_t>(num_experts), 0);
  }
  return s;
}

int ExpertLoadStats::index_of(int layer_id) const {
  auto it = std::lower_bound(layer_ids_.begin(), layer_ids_.end(), layer_id);
  MOE_CHECK(it != layer_ids_.end() && *it == layer_id);
  return static_cast<int>(it - layer_ids_.begin());
}

bool ExpertLoadStats::has_layer(int layer_id) const {
  return std::binary_search(layer_ids_.begin(), layer_ids_.end(), layer_id);
}

void ExpertLoadStats::record_step(int layer_id, const int64_t* tokens_per_expert, int64_t dropped, int64_t rerouted,
                                  int64_t degraded_tokens, const int64_t* degraded_per_expert) {
  MOE_CHECK(tokens_per_expert != nullptr);
  MOE_CHECK(dropped >= 0 && rerouted >= 0 && degraded_tokens >= 0);
  Layer& l = layer(layer_id);
  const bool first = l.steps == 0;
  const double d = ema_decay_;
  for (size_t e = 0; e < l.tokens.size(); ++e) {
    const int64_t c = tokens_per_expert[e];
    MOE_CHECK(c >= 0);
    l.tokens[e] += c;
    l.ema[e] = first ? static_cast<double>(c) : d * l.ema[e] + (1.0 - d) * static_cast<double>(c);
  }
  l.dropped += dropped;
  l.rerouted += rerouted;
  l.degraded_tokens += degraded_tokens;
  if (degraded_per_expert != nullptr) {
    for (size_t e = 0; e < l.degraded_per_expert.size(); ++e) {
      MOE_CHECK(degraded_per_expert[e] >= 0);
      l.degraded_per_expert[e] += degraded_per_expert[e];
    }
  }
  ++l.steps;
}

void ExpertLoadStats::record_adaptive(int layer_id, int64_t adaptive_tokens, int64_t adaptive_dropped,
                                      int64_t requeued) {
  MOE_CHECK(adaptive_tokens >= 0 && adaptive_dropped >= 0 && requeued >= 0);
  Layer& l = layer(layer_id);
  l.adaptive_tokens += adaptive_tokens;
  l.adaptive_dropped += adaptive_dropped;
  l.requeued += requeued;
}

Status ExpertLoadStats::merge(const ExpertLoadStats& other) {
  if (other.layer_ids_ != layer_ids_) {
    return invalid_argument("ExpertLoadStats::merge: the MoE layer ids differ (" + std::to_string(num_layers()) +
                            " vs " + std::to_string(other.num_layers()) + " layers)");
  }
  if (other.num_experts_ != num_experts_) {
    return invalid_argument("ExpertLoadStats::merge: num_experts differs (" + std::to_string(num_experts_) + " vs " +
                            std::to_string(other.num_experts_) + ")");
  }
  if (other.ema_decay_ != ema_decay_) {
    return invalid_argument("ExpertLoadStats::merge: ema_decay differs (" + std::to_string(ema_decay_) + " vs " +
                            std::to_string(other.ema_decay_) + ")");
  }
  // Checked first so that a failed merge leaves *this unchanged.
  std::vector<Layer> merged = layers_;
  for (size_t i = 0; i < merged.size(); ++i) {
    Layer& a = merged[i];
    const Layer& b = other.layers_[i];
    bool overflow = false;
    int64_t sum = 0;
    for (size_t e = 0; e < a.tokens.size(); ++e) {
      overflow |= __builtin_add_overflow(a.tokens[e], b.tokens[e], &a.tokens[e]);
      overflow |= __builtin_add_overflow(sum, a.tokens[e], &sum);
      a.ema[e] += b.ema[e];
    }
    overflow |= __builtin_add_overflow(a.dropped, b.dropped, &a.dropped);
    overflow |= __builtin_add_overflow(a.rerouted, b.rerouted, &a.rerouted);
    overflow |= __builtin_add_overflow(a.degraded_tokens, b.degraded_tokens, &a.degraded_tokens);
    overflow |= __builtin_add_overflow(a.adaptive_tokens, b.adaptive_tokens, &a.adaptive_tokens);
    overflow |= __builtin_add_overflow(a.adaptive_dropped, b.adaptive_dropped, &a.adaptive_dropped);
    overflow |= __builtin_add_overflow(a.requeued, b.requeued, &a.requeued);
    for (size_t e = 0; e < a.degraded_per_expert.size(); ++e) {
      overflow |= __builtin_add_overflow(a.degraded_per_expert[e], b.degraded_per_expert[e], &a.degraded_per_expert[e]);
    }
    if (overflow) {
      return out_of_range("ExpertLoadStats::merge: layer " + std::to_string(layer_ids_[i]) + ": counts overflow int64");
    }
    a.steps = std::max(a.steps, b.steps);
  }
  layers_ = std::move(merged);
  has_ema_ = has_ema_ && other.has_ema_;
  return ok_status();
}

void ExpertLoadStats::clear() {
  for (Layer& l : layers_) {
    std::fill(l.tokens.begin(), l.tokens.end(), 0);
    std::fill(l.ema.begin(), l.ema.end(), 0.0);
    l.dropped = l.rerouted = l.steps = l.degraded_tokens = 0;
    l.adaptive_tokens = l.adaptive_dropped = l.requeued = 0;
    std::fill(l.degraded_per_expert.begin(), l.degraded_per_expert.end(), 0);
  }
  has_ema_ = true;
}

const std::vector<int64_t>& ExpertLoadStats::tokens_per_expert(int layer_id) const { return layer(layer_id).tokens; }
const std::vector<double>& ExpertLoadStats::ema(int layer_id) const { return layer(layer_id).ema; }
int64_t ExpertLoadStats::dropped(int layer_id) const { return layer(layer_id).dropped; }
int64_t ExpertLoadStats::rerouted(int layer_id) const { return layer(layer_id).rerouted; }
int64_t ExpertLoadStats::steps(int layer_id) const { return layer(layer_id).steps; }
int64_t ExpertLoadStats::degraded_tokens(int layer_id) const { return layer(layer_id).degraded_tokens; }
int64_t ExpertLoadStats::adaptive_tokens(int layer_id) const { return layer(layer_id).adaptive_tokens; }
int64_t ExpertLoadStats::adaptive_dropped(int layer_id) const { return layer(layer_id).adaptive_dropped; }
int64_t ExpertLoadStats::requeued(int layer_id) const { return layer(layer_id).requeued; }
const std::vector<int64_t>& ExpertLoadStats::degraded_per_expert(int layer_id) const {
  return layer(layer_id).degraded_per_expert;
}

int64_t ExpertLoadStats::total_tokens(int layer_id) const {
  int64_t sum = 0;
  for (int64_t c : layer(layer_id).tokens) sum += c;
  return sum;
}

double ExpertLoadStats::imbalance(int layer_id) const {
  const std::vector<int64_t>& t = layer(layer_id).tokens;
  int64_t sum = 0, mx = 0;
  for (int64_t c : t) {
    sum += c;
    mx = std::max(mx, c);
  }
  if (sum == 0) return 1.0;
  return static_cast<double>(mx) * static_cast<double>(t.size()) / static_cast<double>(sum);
}

int ExpertLoadStats::hottest_expert(int layer_id) const {
  const std::vector<int64_t>& t = layer(layer_id).tokens;
  return static_cast<int>(std::max_element(t.begin(), t.end()) - t.begin());
}

std::string ExpertLoadStats::to_json_string(int indent) const {
  json layers = json::array();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    json j;
    j["layer"] = layer_ids_[i];
    j["tokens_per_expert"] = l.tokens;
    j["ema"] = l.ema;
    j["dropped"] = l.dropped;
    j["rerouted"] = l.rerouted;
    j["steps"] = l.steps;
    j["degraded_tokens"] = l.degraded_tokens;
    j["degraded_per_expert"] = l.degraded_per_expert;
    j["adaptive_tokens"] = l.adaptive_tokens;
    j["adaptive_dropped"] = l.adaptive_dropped;
    j["requeued"] = l.requeued;
    j["imbalance"] = imbalance(layer_ids_[i]);
    layers.push_back(std::move(j));
  }
  json out;
  out["layers"] = std::move(layers);
  out["num_experts"] = num_experts_;
  out["ema_decay"] = ema_decay_;
  return out.dump(indent);
}

Status ExpertLoadStats::write_json_file(const std::string& path) const {
  return write_file_atomically(path, to_json_string(2) + "\n");
}

StatusOr<SglangLogicalCount> parse_sglang_logical_count(const json& j, const std::string& source) {
  const json& rows = j["logical_count"];
  const std::string where = source + ": field 'logical_count'";
  if (!rows.is_array()) {
    return invalid_argument(where + " must be an array of per-layer arrays (got " + preview(rows) + ")");
  }
  if (rows.empty()) return invalid_argument(where + " is empty (no layers)");
  SglangLogicalCount out;
  size_t width = 0;
  for (size_t l = 0; l < rows.size(); ++l) {
    const std::string w = source + ": logical_count[" + std::to_string(l) + "]";
    std::vector<int64_t> counts;
    MOE_RETURN_IF_ERROR(read_count_row(rows[l], w, &counts));
    if (l == 0) width = counts.size();
    const std::string why = "every layer needs one count per expert: expected " + std::to_string(width);
    MOE_RETURN_IF_ERROR(check_row_length(counts.size(), width, w, "logical_count[0]", why.c_str()));
    if (std::all_of(counts.begin(), counts.end(), [](int64_t c) { return c == 0; })) {
      out.zero_layers.push_back(static_cast<int>(l));
    } else {
      out.layer_ids.push_back(static_cast<int>(l));
      out.counts.push_back(std::move(counts));
    }
  }
  if (out.layer_ids.empty()) {
    return invalid_argument(where + ": every layer is all zeros (no MoE layer recorded any token)");
  }
  return out;
}

StatusOr<ExpertLoadStats> ExpertLoadStats::parse_json(const std::string& text, const std::string& source,
                                                      std::vector<int>* skipped_zero_layers) {
  if (skipped_zero_layers) skipped_zero_layers->clear();
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ...".
    std::string what = e.what();
    const size_t at = what.find("parse error");
    return invalid_argument(source + ": not valid JSON (" + (at == std::string::npos ? what : what.substr(at)) + ")");
  }
  const char* expected =
      "expected {\"layers\": [{\"tokens_per_expert\": [...]}, ...]} or SGLang's "
      "{\"logical_count\": [[...], ...]}";
  if (!j.is_object()) return invalid_argument(source + ": not a JSON object; " + expected);
  if (!j.contains("layers") && j.contains("logical_count")) {
    MOE_ASSIGN_OR_RETURN(SglangLogicalCount sg, parse_sglang_logical_count(j, source));
    auto s = create(sg.layer_ids, sg.num_experts());
    if (!s.ok()) return invalid_argument(source + ": " + s.status().message());
    for (size_t i = 0; i < sg.layer_ids.size(); ++i) s->layers_[i].tokens = std::move(sg.counts[i]);  // ids are ascending
    // (degraded_per_expert keeps create()'s zeros: SGLang records no degraded mode.)
    s->has_ema_ = false;
    if (skipped_zero_layers) *skipped_zero_layers = std::move(sg.zero_layers);
    return s;
  }
  if (!j.contains("layers")) return invalid_argument(source + ": required field 'layers' is missing; " + expected);
  const json& layers = j["layers"];
  if (!layers.is_array()) {
    return invalid_argument(source + ": field 'layers' must be an array (got " + preview(layers) + ")");
  }
  if (layers.empty()) return invalid_argument(source + ": field 'layers' is empty (no MoE layers)");

  double ema_decay = kDefaultEmaDecay;
  if (j.contains("ema_decay") && !j["ema_decay"].is_null()) {
    const json& d = j["ema_decay"];
    if (!d.is_number() || !(d.get<double>() >= 0.0 && d.get<double>() < 1.0)) {
      return invalid_argument(source + ": field 'ema_decay' must be a number in [0, 1) (got " + preview(d) + ")");
    }
    ema_decay = d.get<double>();
  }

  std::vector<int> ids;
  std::vector<Layer> parsed(layers.size());
  size_t with_ema = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string w = source + ": layers[" + std::to_string(i) + "]";
    const json& lj = layers[i];
    if (!lj.is_object()) return invalid_argument(w + " must be an object (got " + preview(lj) + ")");
    int id = static_cast<int>(i);
    if (lj.contains("layer") && !lj["layer"].is_null()) {
      int64_t v = 0;
      if (!read_count(lj["layer"], &v) || v > INT32_MAX) {
        return invalid_argument(w + ".layer must be a non-negative integer layer id (got " + preview(lj["layer"]) +
                                ")");
      }
      id = static_cast<int>(v);
    }
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
      return invalid_argument(w + ".layer: layer id " + std::to_string(id) + " appears twice");
    }
    ids.push_back(id);
    if (!lj.contains("tokens_per_expert")) {
      return invalid_argument(w + ": required field 'tokens_per_expert' is missing");
    }
    Layer& l = parsed[i];
    MOE_RETURN_IF_ERROR(read_count_row(lj["tokens_per_expert"], w + ".tokens_per_expert", &l.tokens));
    if (i > 0) {
      MOE_RETURN_IF_ERROR(check_row_length(l.tokens.size(), parsed[0].tokens.size(), w + ".tokens_per_expert",
                                           "layers[0].tokens_per_expert"));
    }
    if (lj.contains("ema") && !lj["ema"].is_null()) {
      const json& ej = lj["ema"];
      if (!ej.is_array()) return invalid_argument(w + ".ema must be an array of numbers (got " + preview(ej) + ")");
      MOE_RETURN_IF_ERROR(
          check_row_length(ej.size(), l.tokens.size(), w + ".ema", w + ".tokens_per_expert", "one value per expert"));
      l.ema.resize(ej.size());
      for (size_t e = 0; e < ej.size(); ++e) {
        const json& v = ej[e];
        if (!v.is_number() || !(v.get<double>() >= 0.0) || !std::isfinite(v.get<double>())) {
          return invalid_argument(w + ".ema[" + std::to_string(e) + "] must be a non-negative number (got " +
                                  preview(v) + ")");
        }
        l.ema[e] = v.get<double>();
      }
      ++with_ema;
    } else {
      l.ema.assign(l.tokens.size(), 0.0);
      if (with_ema > 0) {
        return invalid_argument(w + ": field 'ema' is missing but earlier layers have it (give it in all or none)");
      }
    }
    if (with_ema > 0 && with_ema != i + 1) {
      return invalid_argument(w + ": field 'ema' is present but layers[0] has none (give it in all or none)");
    }
    MOE_RETURN_IF_ERROR(read_optional_count(lj, "dropped", w, &l.dropped));
    MOE_RETURN_IF_ERROR(read_optional_count(lj, "rerouted", w, &l.rerouted));
    MOE_RETURN_IF_ERROR(read_optional_count(lj, "steps", w, &l.steps));
    MOE_RETURN_IF_ERROR(read_optional_count(lj, "degraded_tokens", w, &l.degraded_tokens));
    MOE_RETURN_IF_ERROR(read_optional_count(lj, "adaptive_tokens", w, &l.adaptive_tokens));
    MOE_RETURN_IF_ERROR(read_optional_count(lj, "adaptive_dropped", w, &l.adaptive_dropped));
    MOE_RETURN_IF_ERROR(read_optional_count(lj, "requeued", w, &l.requeued));
    if (lj.contains("degraded_per_expert") && !lj["degraded_per_expert"].is_null()) {
      MOE_RETURN_IF_ERROR(read_count_row(lj["degraded_per_expert"], w + ".degraded_per_expert", &l.degraded_per_expert));
      MOE_RETURN_IF_ERROR(check_row_length(l.degraded_per_expert.size(), l.tokens.size(), w + ".degraded_per_expert",
                                           w + ".tokens_per_expert", "one count per expert"));
    } else {
      l.degraded_per_expert.assign(l.tokens.size(), 0);
    }
  }
  const int num_experts = static_cast<int>(std::min<size_t>(parsed[0].tokens.size(), INT32_MAX));
  if (j.contains("num_experts") && !j["num_experts"].is_null()) {
    const json& n = j["num_experts"];
    int64_t v = 0;
    if (!read_count(n, &v) || v != num_experts) {
      return invalid_argument(source + ": field 'num_experts' is " + preview(n) + " but the layers have " +
                              std::to_string(num_experts) + " entries in tokens_per_expert");
    }
  }
  auto s = create(ids, num_experts, ema_decay);
  if (!s.ok()) return invalid_argument(source + ": " + s.status().message());
  // create() sorted the ids; place each parsed layer at its sorted position.
  for (size_t i = 0; i < ids.size(); ++i) {
    s->layers_[static_cast<size_t>(s->index_of(ids[i]))] = std::move(parsed[i]);
  }
  s->has_ema_ = with_ema > 0;
  return s;
}

StatusOr<ExpertLoadStats> ExpertLoadStats::load_json_file(const std::string& path,
                                                          std::vector<int>* skipped_zero_layers) {
  MOE_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_json(text, path, skipped_zero_layers);
}

}  // namespace moe
