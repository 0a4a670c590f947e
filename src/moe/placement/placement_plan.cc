#include "moe/placement/placement_plan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "moe/core/atomic_file.h"
#include "moe/core/mapped_file.h"

namespace moe {
namespace {

using nlohmann::json;

std::string at(size_t i) {
  std::string s = "[";  // (not "[" + ...: GCC 12 warns falsely, -Wrestrict)
  s += std::to_string(i);
  s += ']';
  return s;
}

constexpr int64_t kMaxCount = 1 << 24;  // experts, ranks, slots: far beyond any real model

// A required-or-optional integer field in [min_value, kMaxCount].
Status read_int(const json& j, const char* field, const std::string& where, int min_value, int* out) {
  if (!j.contains(field) || j[field].is_null()) return ok_status();
  const json& v = j[field];
  if (!v.is_number_integer() || v.get<int64_t>() < min_value || v.get<int64_t>() > kMaxCount) {
    return invalid_argument(where + "field '" + field + "' must be an integer >= " + std::to_string(min_value) + " (got " +
                            v.dump() + ")");
  }
  *out = static_cast<int>(v.get<int64_t>());
  return ok_status();
}

}  // namespace

StatusOr<ExpertPlacement> layer_placement(const LayerPlan& layer, int num_experts) {
  return ExpertPlacement::from_rank_slots(layer.rank_slots, num_experts);
}

LayerPlan to_layer_plan(const ExpertPlacement& placement, int layer_id) {
  LayerPlan L;
  L.layer = layer_id;
  L.rank_slots = placement.rank_slots();
  L.replica_count = placement.replica_counts();
  return L;
}

std::vector<int> count_replicas(const LayerPlan& layer, int num_experts) {
  std::vector<int> count(static_cast<size_t>(std::max(num_experts, 0)), 0);
  for (const auto& slots : layer.rank_slots) {
    for (int e : slots) {
      if (e >= 0 && e < num_experts) ++count[static_cast<size_t>(e)];
    }
  }
  return count;
}

Status validate_plan(const PlacementPlan& plan) {
  if (plan.num_experts < 1) return invalid_argument("plan: num_experts must be >= 1 (got " + std::to_string(plan.num_experts) + ")");
  if (plan.num_ranks < 1) return invalid_argument("plan: num_ranks must be >= 1 (got " + std::to_string(plan.num_ranks) + ")");
  if (plan.slots_per_rank < 1) {
    return invalid_argument("plan: slots_per_rank must be >= 1 (got " + std::to_string(plan.slots_per_rank) + ")");
  }
  if (plan.layers.empty()) return invalid_argument("plan: 'layers' is empty (need at least one layer)");
  std::set<int> seen_layers;
  const size_t E = static_cast<size_t>(plan.num_experts);
  for (size_t li = 0; li < plan.layers.size(); ++li) {
    const LayerPlan& L = plan.layers[li];
    const std::string where = "layers" + at(li);
    if (L.layer < 0) return invalid_argument(where + ": layer id must be >= 0 (got " + std::to_string(L.layer) + ")");
    if (!seen_layers.insert(L.layer).second) {
      return invalid_argument(where + ": layer " + std::to_string(L.layer) + " appears twice");
    }
    if (L.rank_slots.size() != static_cast<size_t>(plan.num_ranks)) {
      return invalid_argument(where + ".rank_slots has " + std::to_string(L.rank_slots.size()) +
                              " ranks, expected num_ranks " + std::to_string(plan.num_ranks));
    }
    std::vector<int> count(E, 0);
    for (size_t r = 0; r < L.rank_slots.size(); ++r) {
      const auto& slots = L.rank_slots[r];
      const std::string rw = where + ".rank_slots" + at(r);
      if (slots.size() > static_cast<size_t>(plan.slots_per_rank)) {
        return invalid_argument(rw + ": rank " + std::to_string(r) + " holds " + std::to_string(slots.size()) +
                                " experts, more than slots_per_rank " + std::to_string(plan.slots_per_rank));
      }
      std::set<int> on_rank;
      for (size_t s = 0; s < slots.size(); ++s) {
        const int e = slots[s];
        if (e < 0 || e >= plan.num_experts) {
          return invalid_argument(rw + at(s) + ": expert " + std::to_string(e) + " does not exist (num_experts " +
                                  std::to_string(plan.num_experts) + ", ids 0.." + std::to_string(plan.num_experts - 1) + ")");
        }
        if (!on_rank.insert(e).second) {
          return invalid_argument(rw + ": expert " + std::to_string(e) + " appears twice on rank " + std::to_string(r) +
                                  " (replicas must be on distinct ranks)");
        }
        ++count[static_cast<size_t>(e)];
      }
    }
    for (size_t e = 0; e < E; ++e) {
      if (count[e] == 0) {
        return invalid_argument(where + ": expert " + std::to_string(e) + " is on no rank (every expert needs a replica)");
      }
    }
    if (L.replica_count.size() != E) {
      return invalid_argument(where + ".replica_count has " + std::to_string(L.replica_count.size()) +
                              " entries, expected num_experts " + std::to_string(plan.num_experts));
    }
    for (size_t e = 0; e < E; ++e) {
      if (L.replica_count[e] != count[e]) {
        return invalid_argument(where + ".replica_count" + at(e) + " is " + std::to_string(L.replica_count[e]) + " but expert " +
                                std::to_string(e) + " is on " + std::to_string(count[e]) + " rank(s)");
      }
    }
  }
  return ok_status();
}

std::string plan_to_json(const PlacementPlan& plan) {
  std::string out = "{\n";
  out += "  \"num_experts\": " + std::to_string(plan.num_experts) + ",\n";
  out += "  \"num_ranks\": " + std::to_string(plan.num_ranks) + ",\n";
  out += "  \"slots_per_rank\": " + std::to_string(plan.slots_per_rank) + ",\n";
  out += "  \"layers\": [";
  for (size_t li = 0; li < plan.layers.size(); ++li) {
    const LayerPlan& L = plan.layers[li];
    json j;  // keys sort as layer, rank_slots, replica_count
    j["layer"] = L.layer;
    j["rank_slots"] = L.rank_slots;
    j["replica_count"] = L.replica_count;
    out += std::string(li == 0 ? "\n" : ",\n") + "    " + j.dump();
  }
  out += plan.layers.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

StatusOr<PlacementPlan> parse_plan_json(const std::string& text, const std::string& source) {
  const std::string src = source + ": ";
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(src + "not valid JSON");
  if (!j.is_object()) return invalid_argument(src + "expected a JSON object with 'layers'");
  if (!j.contains("layers")) {
    return invalid_argument(src + "required field 'layers' is missing (expected [{\"rank_slots\": [[...], ...]}, ...])");
  }
  const json& layers = j["layers"];
  if (!layers.is_array() || layers.empty()) return invalid_argument(src + "field 'layers' must be a non-empty list");

  PlacementPlan plan;
  int num_experts = 0, num_ranks = 0, slots_per_rank = 0;
  MOE_RETURN_IF_ERROR(read_int(j, "num_experts", src, 1, &num_experts));
  MOE_RETURN_IF_ERROR(read_int(j, "num_ranks", src, 1, &num_ranks));
  MOE_RETURN_IF_ERROR(read_int(j, "slots_per_rank", src, 1, &slots_per_rank));

  int max_id = -1;
  size_t longest = 0;
  for (size_t li = 0; li < layers.size(); ++li) {
    const json& lj = layers[li];
    const std::string where = src + "layers" + at(li);
    if (!lj.is_object()) return invalid_argument(where + " must be an object with 'rank_slots'");
    LayerPlan L;
    L.layer = static_cast<int>(li);
    MOE_RETURN_IF_ERROR(read_int(lj, "layer", where + ": ", 0, &L.layer));
    if (!lj.contains("rank_slots")) return invalid_argument(where + ": required field 'rank_slots' is missing");
    const json& rs = lj["rank_slots"];
    if (!rs.is_array() || rs.empty()) {
      return invalid_argument(where + ".rank_slots must be a non-empty list (one list of expert ids per rank)");
    }
    for (size_t r = 0; r < rs.size(); ++r) {
      const json& slots = rs[r];
      if (!slots.is_array()) return invalid_argument(where + ".rank_slots" + at(r) + " must be a list of expert ids");
      std::vector<int> ids;
      for (size_t s = 0; s < slots.size(); ++s) {
        const json& v = slots[s];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxCount) {
          return invalid_argument(where + ".rank_slots" + at(r) + at(s) + ": expert id must be an integer >= 0 (got " +
                                  v.dump() + ")");
        }
        const int e = static_cast<int>(v.get<int64_t>());
        if (num_experts > 0 && e >= num_experts) {
          return invalid_argument(where + ".rank_slots" + at(r) + at(s) + ": expert " + std::to_string(e) +
                                  " does not exist (num_experts " + std::to_string(num_experts) + ")");
        }
        max_id = std::max(max_id, e);
        ids.push_back(e);
      }
      longest = std::max(longest, ids.size());
      L.rank_slots.push_back(std::move(ids));
    }
    if (num_ranks == 0) num_ranks = static_cast<int>(rs.size());
    if (rs.size() != static_cast<size_t>(num_ranks)) {
      return invalid_argument(where + ".rank_slots has " + std::to_string(rs.size()) + " ranks, expected " +
                              std::to_string(num_ranks) + (j.contains("num_ranks") ? " (num_ranks)" : " (as in layers[0])"));
    }
    if (lj.contains("replica_count")) {
      const json& rc = lj["replica_count"];
      if (!rc.is_array()) return invalid_argument(where + ".replica_count must be a list of integers");
      for (size_t e = 0; e < rc.size(); ++e) {
        if (!rc[e].is_number_integer() || rc[e].get<int64_t>() < 0 || rc[e].get<int64_t>() > kMaxCount) {
          return invalid_argument(where + ".replica_count" + at(e) + " must be an integer >= 0 (got " + rc[e].dump() +
                                  ")");
        }
        L.replica_count.push_back(static_cast<int>(rc[e].get<int64_t>()));
      }
    }
    plan.layers.push_back(std::move(L));
  }
  if (max_id < 0) return invalid_argument(src + "no layer places any expert");
  plan.num_experts = num_experts > 0 ? num_experts : max_id + 1;
  plan.num_ranks = num_ranks;
  plan.slots_per_rank = slots_per_rank > 0 ? slots_per_rank : static_cast<int>(longest);
  for (size_t li = 0; li < plan.layers.size(); ++li) {
    LayerPlan& L = plan.layers[li];
    const bool given = !L.replica_count.empty() || layers[li].contains("replica_count");
    if (given && L.replica_count.size() != static_cast<size_t>(plan.num_experts)) {
      return invalid_argument(src + "layers" + at(li) + ".replica_count has " + std::to_string(L.replica_count.size()) +
                              " entries, expected " + std::to_string(plan.num_experts) + " (num_experts)");
    }
    if (!given) L.replica_count = count_replicas(L, plan.num_experts);
  }
  Status st = validate_plan(plan);
  if (!st.ok()) return Status(st.code(), src + st.message());
  return plan;
}

StatusOr<PlacementPlan> load_plan_file(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_plan_json(text, path);
}

Status write_plan_file(const PlacementPlan& plan, const std::string& path) {
  MOE_RETURN_IF_ERROR(validate_plan(plan));
  return write_file_atomically(path, plan_to_json(plan)).with_context("placement plan");
}

}  // namespace moe
