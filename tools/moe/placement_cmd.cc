// moe placement plan: per-layer expert load -> a placement plan (which logical expert
// sits in each slot of each rank, hot experts replicated); prints max/mean rank load and
// the cross-node token share before (one copy each, contiguous blocks) and after.
// moe placement eval: the same report for an existing plan file on a load file (e.g. a
// plan made from one workload's statistics, evaluated on another's).
//
//   moe placement plan --load LOAD.json --num-ranks 16 --num-nodes 2 --slots-per-rank 18 --out PLAN.json
//   moe placement plan --load LOAD.json --num-ranks 8 --memory-per-rank 80000000000 --expert-bytes 44040192
//   moe placement plan --load LOAD.json --num-ranks 4 --slots-per-rank 4 --min-replicas 2 --out PLAN.json
//   moe placement eval --plan PLAN.json --load OTHER.json --num-nodes 2
//
// The model behind the numbers (src/moe/placement/replica_planner.h): an expert's load splits
// evenly over its replicas; tokens start uniformly on all ranks and use a replica on
// their own node when there is one.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/core/text_format.h"
#include "moe/placement/placement_plan.h"
#include "moe/placement/replica_planner.h"

namespace moe::cli {
namespace {

using nlohmann::json;

struct PlacementFlags {
  // plan
  std::string load;
  int num_ranks = 0;
  int num_nodes = 1;
  int slots_per_rank = 0;
  int64_t memory_per_rank = -1;
  int64_t expert_bytes = -1;
  int replica_cap = 4;
  int min_replicas = 1;
  int num_groups = 0;
  int num_experts = 0;
  std::string algorithm = "balanced";
  double max_load_tolerance = 1e-3;
  std::string out;
  std::string format = "table";
  // eval
  std::string plan;
};

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

// The report shared by plan and eval: per layer and overall, before vs after.
struct Report {
  std::string load_path;
  LoadMatrix load;
  int num_ranks = 0, num_nodes = 1, slots_per_rank = 0, replica_cap = 0;
  int min_replicas = 0;           // plan only (0: not reported)
  PlanMetrics before, after;
  std::vector<double> bound_max;  // per layer, lower bound on the max rank load
  std::vector<int> replicated;    // per layer, experts with more than one replica
  std::vector<int> max_replicas;  // per layer
  double planner_ms = -1;         // plan only
};

int print_report(const Report& r, const std::string& format, const std::string& header) {
  const size_t L = r.load.load.size();
  double sum_bound = 0, sum_mean = 0;
  for (size_t l = 0; l < L; ++l) {
    sum_bound += r.bound_max[l];
    sum_mean += r.after.layers[l].mean_load;
  }
  const double bound = sum_mean > 0 ? sum_bound / sum_mean : 1.0;
  if (format == "json") {
    json j;
    j["load"] = r.load_path;
    j["num_layers"] = L;
    j["num_experts"] = r.load.num_experts();
    j["num_ranks"] = r.num_ranks;
    j["num_nodes"] = r.num_nodes;
    j["slots_per_rank"] = r.slots_per_rank;
    if (r.replica_cap > 0) j["replica_cap"] = r.replica_cap;
    if (r.min_replicas > 0) j["min_replicas"] = r.min_replicas;
    j["skipped_zero_layers"] = r.load.skipped_zero_layers;
    json layers = json::array();
    for (size_t l = 0; l < L; ++l) {
      const LayerMetrics& b = r.before.layers[l];
      const LayerMetrics& a = r.after.layers[l];
      layers.push_back({{"layer", r.load.layer_ids[l]},
                        {"before", {{"max_over_mean", b.max_over_mean}, {"cross_node_share", b.cross_node_share}}},
                        {"after", {{"max_over_mean", a.max_over_mean}, {"cross_node_share", a.cross_node_share}}},
                        {"bound_max_over_mean", a.mean_load > 0 ? r.bound_max[l] / a.mean_load : 1.0},
                        {"replicated_experts", r.replicated[l]},
                        {"max_replicas", r.max_replicas[l]}});
    }
    j["layers"] = layers;
    j["overall"] = {{"before",
                     {{"max_over_mean", r.before.max_over_mean},
                      {"worst_layer_max_over_mean", r.before.worst_layer_max_over_mean},
                      {"cross_node_share", r.before.cross_node_share}}},
                    {"after",
                     {{"max_over_mean", r.after.max_over_mean},
                      {"worst_layer_max_over_mean", r.after.worst_layer_max_over_mean},
                      {"cross_node_share", r.after.cross_node_share}}},
                    {"bound_max_over_mean", bound}};
    if (r.planner_ms >= 0) j["planner_ms"] = r.planner_ms;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s", header.c_str());
  std::printf("%5s  %15s  %14s  %6s  %17s  %6s  %10s  %12s\n", "layer", "max/mean before", "max/mean after", "bound",
              "cross-node before", "after", "replicated", "max replicas");
  for (size_t l = 0; l < L; ++l) {
    const LayerMetrics& b = r.before.layers[l];
    const LayerMetrics& a = r.after.layers[l];
    std::printf("%5d  %15s  %14s  %6s  %17s  %6s  %10d  %12d\n", r.load.layer_ids[l], format_fixed(b.max_over_mean, 3).c_str(),
                format_fixed(a.max_over_mean, 3).c_str(), format_fixed(a.mean_load > 0 ? r.bound_max[l] / a.mean_load : 1.0, 3).c_str(),
                format_fixed(b.cross_node_share, 3).c_str(), format_fixed(a.cross_node_share, 3).c_str(), r.replicated[l],
                r.max_replicas[l]);
  }
  std::printf("overall (sum over layers of max / of mean): max/mean %s -> %s (bound %s); worst layer %s -> %s; "
              "cross-node share %s -> %s\n",
              format_fixed(r.before.max_over_mean, 3).c_str(), format_fixed(r.after.max_over_mean, 3).c_str(), format_fixed(bound, 3).c_str(),
              format_fixed(r.before.worst_layer_max_over_mean, 3).c_str(), format_fixed(r.after.worst_layer_max_over_mean, 3).c_str(),
              format_fixed(r.before.cross_node_share, 3).c_str(), format_fixed(r.after.cross_node_share, 3).c_str());
  if (r.planner_ms >= 0) {
    std::printf("planner: %s ms (%s ms per layer)\n", format_fixed(r.planner_ms, 2).c_str(),
                format_fixed(r.planner_ms / static_cast<double>(L), 3).c_str());
  }
  return 0;
}

// Fills the before (contiguous, one copy) metrics and the per-layer replica summary.
std::string fill_report(const PlacementPlan& plan, Report* r) {
  const int E = r->load.num_experts();
  auto before = evaluate_plan(contiguous_plan(E, r->num_ranks, r->load.layer_ids), r->load.load, r->num_nodes);
  if (!before.ok()) return before.status().message();
  auto after = evaluate_plan(plan, r->load.load, r->num_nodes);
  if (!after.ok()) return after.status().message();
  r->before = std::move(before).value();
  r->after = std::move(after).value();
  for (size_t l = 0; l < r->load.load.size(); ++l) {
    // With the plan's own cap unknown (eval), the bound uses the largest replica count in use.
    int max_rep = 1, replicated = 0;
    for (int c : plan.layers[l].replica_count) {
      max_rep = std::max(max_rep, c);
      replicated += c > 1 ? 1 : 0;
    }
    r->bound_max.push_back(
        max_load_lower_bound(r->load.load[l], r->num_ranks, r->slots_per_rank, r->replica_cap > 0 ? r->replica_cap : max_rep));
    r->replicated.push_back(replicated);
    r->max_replicas.push_back(max_rep);
  }
  return "";
}

std::string load_header(const Report& r) {
  std::string s = "load: " + r.load_path + ": " + std::to_string(r.load.load.size()) + " MoE layers x " +
                  std::to_string(r.load.num_experts()) + " experts";
  if (!r.load.skipped_zero_layers.empty()) s += " (skipped all-zero layers: " + join_ints(r.load.skipped_zero_layers) + ")";
  return s + "\n";
}

int run_plan(const PlacementFlags& f) {
  if (f.num_ranks < 1) return fail("--num-ranks must be >= 1 (got " + std::to_string(f.num_ranks) + ")");
  if (f.num_nodes < 1) return fail("--num-nodes must be >= 1 (got " + std::to_string(f.num_nodes) + ")");
  if (f.num_ranks % f.num_nodes != 0) {
    return fail("--num-ranks " + std::to_string(f.num_ranks) + " is not divisible by --num-nodes " +
                std::to_string(f.num_nodes) + " (every node needs the same number of ranks)");
  }
  if (f.replica_cap < 1) {
    return fail("--replica-cap must be >= 1 (got " + std::to_string(f.replica_cap) +
                "): every expert keeps at least one replica");
  }
  if (f.min_replicas < 1) {
    return fail("--min-replicas must be >= 1 (got " + std::to_string(f.min_replicas) +
                "): every expert keeps at least one replica");
  }
  if (f.min_replicas > f.replica_cap) {
    return fail("--min-replicas " + std::to_string(f.min_replicas) + " exceeds --replica-cap " +
                std::to_string(f.replica_cap));
  }
  if (f.min_replicas > f.num_ranks) {
    return fail("--min-replicas " + std::to_string(f.min_replicas) + " exceeds --num-ranks " +
                std::to_string(f.num_ranks) + " (replicas of one expert sit on distinct ranks)");
  }
  if (f.num_groups < 0) return fail("--num-groups must be >= 0 (got " + std::to_string(f.num_groups) + ")");
  if (f.num_groups > 0 && f.min_replicas > f.num_ranks / f.num_nodes) {
    return fail("--min-replicas " + std::to_string(f.min_replicas) + " exceeds the " +
                std::to_string(f.num_ranks / f.num_nodes) +
                " ranks per node (with --num-groups an expert's replicas stay on its group's node)");
  }
  if (f.algorithm != "balanced" && f.algorithm != "eplb") {
    return fail("--algorithm must be balanced or eplb (got '" + f.algorithm + "')");
  }
  if (!(f.max_load_tolerance >= 0 && f.max_load_tolerance <= 1)) {
    return fail("--max-load-tolerance must be in [0, 1] (got " + format_fixed(f.max_load_tolerance, 6) + ")");
  }
  if (f.format != "table" && f.format != "json") return fail("--format must be table or json (got '" + f.format + "')");
  const bool by_memory = f.memory_per_rank >= 0 || f.expert_bytes >= 0;
  int slots = f.slots_per_rank;
  std::string slots_source = "--slots-per-rank " + std::to_string(slots);
  if (by_memory) {
    if (f.slots_per_rank != 0) return fail("give either --slots-per-rank or --memory-per-rank with --expert-bytes, not both");
    if (f.memory_per_rank < 0) return fail("--expert-bytes needs --memory-per-rank (the expert memory budget per rank)");
    if (f.expert_bytes < 1) {
      return fail(f.expert_bytes < 0 ? "--memory-per-rank needs --expert-bytes (the bytes of one expert's weights)"
                                     : "--expert-bytes must be >= 1 (got " + std::to_string(f.expert_bytes) + ")");
    }
    const int64_t s = f.memory_per_rank / f.expert_bytes;
    slots = static_cast<int>(std::min<int64_t>(s, 1 << 24));
    slots_source = "--memory-per-rank " + std::to_string(f.memory_per_rank) + " / --expert-bytes " +
                   std::to_string(f.expert_bytes) + " = " + std::to_string(s) + " slots per rank";
    if (slots < 1) return fail(slots_source + ": not even one expert fits on a rank");
  } else if (slots < 1) {
    return fail(f.slots_per_rank == 0 ? "give --slots-per-rank (or --memory-per-rank with --expert-bytes)"
                                      : "--slots-per-rank must be >= 1 (got " + std::to_string(slots) + ")");
  }

  Report r;
  r.load_path = f.load;
  auto load = read_load_file(f.load);
  if (!load.ok()) return fail("--load " + load.status().message());
  r.load = std::move(load).value();
  const int E = r.load.num_experts();
  if (f.num_experts > 0 && E != f.num_experts) {
    return fail("--load " + f.load + " has " + std::to_string(E) + " experts per layer, expected --num-experts " +
                std::to_string(f.num_experts));
  }
  if (static_cast<int64_t>(slots) * f.num_ranks < E) {
    return fail(slots_source + " x --num-ranks " + std::to_string(f.num_ranks) + " = " +
                std::to_string(static_cast<int64_t>(slots) * f.num_ranks) + " slots: too few to hold each of the " +
                std::to_string(E) + " experts of " + f.load + " once (need at least " +
                std::to_string((E + f.num_ranks - 1) / f.num_ranks) + " slots per rank)");
  }
  if (static_cast<int64_t>(slots) * f.num_ranks < static_cast<int64_t>(E) * f.min_replicas) {
    const int64_t need = static_cast<int64_t>(E) * f.min_replicas;
    return fail("--min-replicas " + std::to_string(f.min_replicas) + ": not enough slots: need " + std::to_string(need) +
                " (" + std::to_string(E) + " experts x " + std::to_string(f.min_replicas) + "), have " +
                std::to_string(static_cast<int64_t>(slots) * f.num_ranks) + " (" + slots_source + " x --num-ranks " +
                std::to_string(f.num_ranks) + "; need at least " + std::to_string((need + f.num_ranks - 1) / f.num_ranks) +
                " slots per rank)");
  }
  if (f.num_groups > 0 && (E % f.num_groups != 0 || f.num_groups % f.num_nodes != 0)) {
    return fail("--num-groups " + std::to_string(f.num_groups) + " must divide the " + std::to_string(E) +
                " experts and be a multiple of --num-nodes " + std::to_string(f.num_nodes) +
                " (each node gets whole groups)");
  }

  PlannerInput in;
  in.load = r.load.load;
  in.layer_ids = r.load.layer_ids;
  in.num_ranks = f.num_ranks;
  in.num_nodes = f.num_nodes;
  in.slots_per_rank = slots;
  in.replica_cap = f.replica_cap;
  in.min_replicas = f.min_replicas;
  in.num_groups = f.num_groups;
  in.max_load_tolerance = f.max_load_tolerance;
  in.algorithm = f.algorithm == "eplb" ? PlannerAlgorithm::kEplb : PlannerAlgorithm::kBalanced;
  const auto t0 = std::chrono::steady_clock::now();
  auto plan = plan_placement(in);
  const auto t1 = std::chrono::steady_clock::now();
  if (!plan.ok()) return fail(plan.status().message());
  r.planner_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  r.num_ranks = f.num_ranks;
  r.num_nodes = f.num_nodes;
  r.slots_per_rank = slots;
  r.replica_cap = f.replica_cap;
  r.min_replicas = f.min_replicas;
  if (std::string bad = fill_report(*plan, &r); !bad.empty()) return fail(bad);

  if (!f.out.empty()) {
    Status st = write_plan_file(*plan, f.out);
    if (!st.ok()) return fail("--out " + st.message());
  }
  const int64_t total_slots = static_cast<int64_t>(slots) * f.num_ranks;
  std::string header = load_header(r);
  header += "plan: " + std::to_string(f.num_ranks) + " ranks = " + std::to_string(f.num_nodes) + " node(s) x " +
            std::to_string(f.num_ranks / f.num_nodes) + ", " + std::to_string(slots) + " slots per rank (" +
            std::to_string(total_slots) + " slots = " + std::to_string(E) + " experts + " +
            format_fixed(100.0 * static_cast<double>(total_slots - E) / E, 1) + "% extra), replica cap " +
            std::to_string(f.replica_cap) + ", min replicas " + std::to_string(f.min_replicas) + (f.num_groups > 0 ? ", " + std::to_string(f.num_groups) + " groups" : "") +
            ", algorithm " + f.algorithm + "\n";
  header += "(before: one copy each, rank r holds experts [r*E/R, (r+1)*E/R); bound: max(total/R, smallest possible max load per replica))\n";
  const int rc = print_report(r, f.format, header);
  if (!f.out.empty() && f.format == "table") std::printf("wrote %s\n", f.out.c_str());
  return rc;
}

int run_eval(const PlacementFlags& f) {
  if (f.format != "table" && f.format != "json") return fail("--format must be table or json (got '" + f.format + "')");
  auto plan = load_plan_file(f.plan);
  if (!plan.ok()) return fail("--plan " + plan.status().message());
  if (f.num_nodes < 1 || plan->num_ranks % f.num_nodes != 0) {
    return fail("--num-nodes " + std::to_string(f.num_nodes) + " does not divide the plan's " +
                std::to_string(plan->num_ranks) + " ranks");
  }
  Report r;
  r.load_path = f.load;
  auto load = read_load_file(f.load);
  if (!load.ok()) return fail("--load " + load.status().message());
  r.load = std::move(load).value();
  if (r.load.num_experts() != plan->num_experts) {
    return fail("--load " + f.load + " has " + std::to_string(r.load.num_experts()) + " experts per layer but --plan " +
                f.plan + " places " + std::to_string(plan->num_experts));
  }
  std::map<int, const LayerPlan*> by_id;
  for (const LayerPlan& L : plan->layers) by_id[L.layer] = &L;
  PlacementPlan matched = *plan;
  matched.layers.clear();
  for (int id : r.load.layer_ids) {
    auto it = by_id.find(id);
    if (it == by_id.end()) return fail("--plan " + f.plan + " has no layer " + std::to_string(id) + " (in " + f.load + ")");
    matched.layers.push_back(*it->second);
  }
  r.num_ranks = plan->num_ranks;
  r.num_nodes = f.num_nodes;
  r.slots_per_rank = plan->slots_per_rank;
  if (std::string bad = fill_report(matched, &r); !bad.empty()) return fail(bad);
  std::string header = load_header(r);
  header += "plan: " + f.plan + ": " + std::to_string(plan->num_ranks) + " ranks = " + std::to_string(f.num_nodes) +
            " node(s), " + std::to_string(plan->slots_per_rank) + " slots per rank\n";
  header += "(before: one copy each, contiguous blocks; bound: max(total/R, hottest/max replicas in the plan))\n";
  return print_report(r, f.format, header);
}

}  // namespace

RunFn add_placement_command(CLI::App& placement) {
  auto f = std::make_shared<PlacementFlags>();
  auto* plan = placement.add_subcommand(
      "plan", "Plan expert replicas and slots from per-layer expert load (minimise the max rank load, then cross-node "
              "tokens)");
  plan->add_option("--load", f->load,
                   "Load JSON: {\"load\": [[per expert] per layer]}, SGLang's {\"logical_count\": ...} or moe "
                   "generate --stats-out's file")
      ->required();
  plan->add_option("--num-ranks", f->num_ranks, "Expert-parallel ranks")->required();
  plan->add_option("--num-nodes", f->num_nodes, "Nodes (consecutive blocks of ranks; must divide --num-ranks)")
      ->capture_default_str();
  plan->add_option("--slots-per-rank", f->slots_per_rank, "Expert slots per rank (>= experts / ranks)");
  plan->add_option("--memory-per-rank", f->memory_per_rank,
                   "Expert memory budget per rank in bytes (with --expert-bytes: slots = budget / expert bytes)");
  plan->add_option("--expert-bytes", f->expert_bytes, "Bytes of one expert's weights");
  plan->add_option("--replica-cap", f->replica_cap, "Most replicas of one expert")->capture_default_str();
  plan->add_option("--min-replicas", f->min_replicas,
                   "Fewest replicas of every expert, on distinct ranks (and, without --num-groups, on distinct nodes "
                   "as far as there are nodes): losing any K-1 ranks leaves each expert a live replica; needs "
                   "--num-ranks x slots >= experts x K")
      ->capture_default_str();
  plan->add_option("--num-groups", f->num_groups,
                   "Expert groups (DeepSeek-V3: 8): each group's experts and replicas stay on one node; 0 = none")
      ->capture_default_str();
  plan->add_option("--num-experts", f->num_experts, "Experts per layer the load file must have (checked)");
  plan->add_option("--algorithm", f->algorithm,
                   "balanced (greedy replication, packing, local search) or eplb (DeepSeek EPLB-style baseline)")
      ->capture_default_str();
  plan->add_option("--max-load-tolerance", f->max_load_tolerance,
                   "balanced: plans within this fraction of the lowest max rank load count as equal; the lowest "
                   "cross-node share among them wins")
      ->capture_default_str();
  plan->add_option("--out", f->out, "PLAN.json to write");
  plan->add_option("--format", f->format, "Report as table or json")->capture_default_str();

  auto* eval = placement.add_subcommand("eval", "Report max/mean rank load and cross-node share of a plan on a load file");
  eval->add_option("--plan", f->plan, "PLAN.json (moe placement plan --out)")->required();
  eval->add_option("--load", f->load, "Load JSON (as for plan); every layer must be in the plan")->required();
  eval->add_option("--num-nodes", f->num_nodes, "Nodes (must divide the plan's ranks)")->capture_default_str();
  eval->add_option("--format", f->format, "Report as table or json")->capture_default_str();

  return [f, plan] { return plan->parsed() ? run_plan(*f) : run_eval(*f); };
}

}  // namespace moe::cli
