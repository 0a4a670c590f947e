#include "moe/planner/hardware_profile.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace moe::planner {
namespace {

using json = nlohmann::json;

constexpr std::array<Primitive, kNumPrimitives> kAll = {Primitive::kAllReduce, Primitive::kReduceScatter,
                                                        Primitive::kAllGather, Primitive::kAllToAll, Primitive::kP2p};

// Reads a required positive (or non-negative) number at obj[key]; `path` names it.
Status read_number(const json& obj, const std::string& key, const std::string& path, bool allow_zero, double* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return invalid_argument(path + "." + key + ": missing");
  if (!it->is_number()) return invalid_argument(path + "." + key + ": must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || (!allow_zero && v == 0)) {
    return invalid_argument(path + "." + key + ": must be " + (allow_zero ? ">= 0" : "> 0") + " (got " + it->dump() +
                            ")");
  }
  *out = v;
  return ok_status();
}

Status read_optional(const json& obj, const std::string& key, const std::string& path, double lo_exclusive,
                     double hi_inclusive, double* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return ok_status();
  if (!it->is_number()) return invalid_argument(path + "." + key + ": must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v <= lo_exclusive || v > hi_inclusive) {
    std::ostringstream os;
    os << path << "." << key << ": must be in (" << lo_exclusive << ", " << hi_inclusive << "] (got " << it->dump()
       << ")";
    return invalid_argument(os.str());
  }
  *out = v;
  return ok_status();
}

Status read_tier(const json& tiers, Tier t, const std::string& path, LinkTier* out) {
  const std::string tp = path + "." + tier_name(t);
  auto it = tiers.find(tier_name(t));
  if (it == tiers.end()) return invalid_argument(tp + ": missing (every profile needs intra_node and inter_node)");
  if (!it->is_object()) return invalid_argument(tp + ": must be an object");
  for (Primitive p : kAll) {
    const std::string pp = tp + "." + primitive_name(p);
    auto pit = it->find(primitive_name(p));
    if (pit == it->end()) return invalid_argument(pp + ": missing");
    if (!pit->is_object()) return invalid_argument(pp + ": must be an object {alpha, beta | bandwidth}");
    AlphaBeta ab;
    MOE_RETURN_IF_ERROR(read_number(*pit, "alpha", pp, /*allow_zero=*/true, &ab.alpha));
    if (pit->contains("beta")) {
      MOE_RETURN_IF_ERROR(read_number(*pit, "beta", pp, false, &ab.beta));
    } else if (pit->contains("bandwidth")) {
      double bw = 0;
      MOE_RETURN_IF_ERROR(read_number(*pit, "bandwidth", pp, false, &bw));
      ab.beta = 1.0 / bw;
    } else {
      return invalid_argument(pp + ": needs beta (s/byte) or bandwidth (B/s)");
    }
    (*out)[p] = ab;
  }
  return ok_status();
}

}  // namespace

const char* primitive_name(Primitive p) {
  switch (p) {
    case Primitive::kAllReduce:
      return "allreduce";
    case Primitive::kReduceScatter:
      return "reduce_scatter";
    case Primitive::kAllGather:
      return "allgather";
    case Primitive::kAllToAll:
      return "alltoall";
    case Primitive::kP2p:
      return "p2p";
  }
  return "?";
}

const char* tier_name(Tier t) { return t == Tier::kIntraNode ? "intra_node" : "inter_node"; }

StatusOr<HardwareProfile> parse_hardware_profile(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    return invalid_argument(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return invalid_argument(source + ": a profile must be a JSON object");
  HardwareProfile p;
  p.name = j.value("name", source);
  if (auto it = j.find("provenance"); it != j.end() && it->is_string()) p.provenance = it->get<std::string>();
  auto dpn = j.find("devices_per_node");
  if (dpn == j.end()) return invalid_argument(source + ": devices_per_node: missing");
  if (!dpn->is_number_integer() || dpn->get<int64_t>() < 1 || dpn->get<int64_t>() > 1 << 20) {
    return invalid_argument(source + ": devices_per_node: must be an integer >= 1 (got " + dpn->dump() + ")");
  }
  p.devices_per_node = static_cast<int>(dpn->get<int64_t>());

  auto dev = j.find("device");
  if (dev == j.end() || !dev->is_object()) return invalid_argument(source + ": device: missing (an object)");
  const std::string dp = source + ": device";
  auto peak = dev->find("peak_flops");
  if (peak == dev->end() || !peak->is_object()) {
    return invalid_argument(dp + ".peak_flops: missing (an object by dtype: {\"bf16\": FLOP/s, \"fp8\": FLOP/s})");
  }
  MOE_RETURN_IF_ERROR(read_number(*peak, "bf16", dp + ".peak_flops", false, &p.device.peak_flops_bf16));
  if (peak->contains("fp8")) {
    MOE_RETURN_IF_ERROR(read_number(*peak, "fp8", dp + ".peak_flops", true, &p.device.peak_flops_fp8));
  }
  MOE_RETURN_IF_ERROR(read_number(*dev, "memory_bandwidth", dp, false, &p.device.memory_bandwidth));
  MOE_RETURN_IF_ERROR(read_number(*dev, "memory_capacity", dp, false, &p.device.memory_capacity));
  MOE_RETURN_IF_ERROR(read_optional(*dev, "compute_efficiency", dp, 0, 1, &p.device.compute_efficiency));
  MOE_RETURN_IF_ERROR(read_optional(*dev, "memory_efficiency", dp, 0, 1, &p.device.memory_efficiency));
  if (dev->contains("reserved_memory")) {
    MOE_RETURN_IF_ERROR(read_number(*dev, "reserved_memory", dp, true, &p.device.reserved_memory));
    if (p.device.reserved_memory >= p.device.memory_capacity) {
      return invalid_argument(dp + ".reserved_memory: must be below memory_capacity");
    }
  }

  if (auto sr = dev->find("shared_ranks"); sr != dev->end()) {
    if (!sr->is_number_integer() || sr->get<int64_t>() < 1 || sr->get<int64_t>() > 1 << 20) {
      return invalid_argument(dp + ".shared_ranks: must be an integer >= 1 (got " + sr->dump() + ")");
    }
    p.device.shared_ranks = static_cast<int>(sr->get<int64_t>());
  }
  if (auto solo = dev->find("solo_speedup"); solo != dev->end()) {
    if (!solo->is_object()) return invalid_argument(dp + ".solo_speedup: must be an object {compute, memory}");
    for (auto [key, out] : {std::pair{"compute", &p.device.solo_compute_speedup},
                            std::pair{"memory", &p.device.solo_memory_speedup}}) {
      MOE_RETURN_IF_ERROR(read_optional(*solo, key, dp + ".solo_speedup", 0, 1024, out));
      if (*out < 1) return invalid_argument(dp + ".solo_speedup." + key + ": must be >= 1");
    }
  }

  auto tiers = j.find("tiers");
  if (tiers == j.end() || !tiers->is_object()) {
    return invalid_argument(source + ": tiers: missing (an object with intra_node and inter_node)");
  }
  MOE_RETURN_IF_ERROR(read_tier(*tiers, Tier::kIntraNode, source + ": tiers", &p.intra_node));
  MOE_RETURN_IF_ERROR(read_tier(*tiers, Tier::kInterNode, source + ": tiers", &p.inter_node));
  return p;
}

StatusOr<HardwareProfile> load_hardware_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("--profile " + path + ": cannot open");
  std::ostringstream os;
  os << in.rdbuf();
  return parse_hardware_profile(os.str(), path);
}

std::string hardware_profile_json(const HardwareProfile& p) {
  json j;
  j["name"] = p.name;
  j["provenance"] = p.provenance;
  j["devices_per_node"] = p.devices_per_node;
  json peak = {{"bf16", p.device.peak_flops_bf16}};
  if (p.device.peak_flops_fp8 > 0) peak["fp8"] = p.device.peak_flops_fp8;
  j["device"] = {{"peak_flops", peak},
                 {"memory_bandwidth", p.device.memory_bandwidth},
                 {"memory_capacity", p.device.memory_capacity},
                 {"compute_efficiency", p.device.compute_efficiency},
                 {"memory_efficiency", p.device.memory_efficiency},
                 {"reserved_memory", p.device.reserved_memory},
                 {"shared_ranks", p.device.shared_ranks},
                 {"solo_speedup", {{"compute", p.device.solo_compute_speedup}, {"memory", p.device.solo_memory_speedup}}}};
  for (Tier t : {Tier::kIntraNode, Tier::kInterNode}) {
    json tj;
    for (Primitive prim : kAll) tj[primitive_name(prim)] = {{"alpha", p.tier(t)[prim].alpha}, {"beta", p.tier(t)[prim].beta}};
    j["tiers"][tier_name(t)] = tj;
  }
  return j.dump(2) + "\n";
}

}  // namespace moe::planner
