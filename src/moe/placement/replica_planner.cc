#include "moe/placement/replica_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <numeric>
#include <queue>
#include <set>

#include <nlohmann/json.hpp>

#include "moe/core/check.h"
#include "moe/core/mapped_file.h"
#include "moe/placement/replica_packing.h"
#include "moe/core/text_format.h"

namespace moe {
namespace {

using placement_detail::Packer;
using placement_detail::kRelEps;
using placement_detail::replicate;
using placement_detail::replicate_for_coverage;
using placement_detail::pack_lpt;
using placement_detail::improve_max;
using placement_detail::improve_cross;
using placement_detail::iota_vec;

struct LayerShape {
  int E, R, N, S, cap, G;
  int min_replicas;
  PlannerAlgorithm algorithm;
  double tolerance;  // max_load_tolerance
};

// Without expert groups: the whole layer is one packing problem.
void plan_flat(const std::vector<double>& w, const LayerShape& L, LayerPlan* out) {
  const int S = std::min(L.S, L.E);
  const int cap = std::min(L.cap, L.R);
  const int64_t total_slots = static_cast<int64_t>(L.R) * S;
  const std::vector<int> experts = iota_vec(0, L.E);
  const int m = L.min_replicas;
  const std::vector<int> r = replicate(w, experts, total_slots, cap, m);
  std::vector<int> nodes(static_cast<size_t>(L.R));
  for (int p = 0; p < L.R; ++p) nodes[static_cast<size_t>(p)] = p / (L.R / L.N);
  // The floors: >= m replicas per expert, on >= min(m, N) nodes.
  auto make = [&](const std::vector<int>& counts) {
    return Packer(L.E, S, iota_vec(0, L.R), nodes, L.N, w, counts, cap, m, std::min(m, L.N));
  };

  if (L.algorithm == PlannerAlgorithm::kEplb) {
    Packer P = make(r);
    pack_lpt(P, experts, /*spread=*/false);
    P.emit(experts, out);
    return;
  }
  // Candidates, each packed (LPT, with and without preferring new nodes when there are
  // several) and improved for the max (improve_max):
  //  - the greedy replica counts, every slot used (the baseline's start);
  //  - the fewest replicas that keep every replica at or below the mean rank load,
  //    leaving slots free (a rank with a big replica need not be filled with more);
  //  - with several nodes, coverage-oriented counts (replicate_for_coverage).
  // M = the lowest max among them. The candidates within max_load_tolerance of M then get
  // the cross-node pass under the limit M * (1 + tolerance), and the lowest crossing wins
  // (then the lower max, then the earlier candidate).
  struct Candidate {
    Packer packer;
    double max_load;
  };
  std::vector<Candidate> cands;
  std::vector<std::vector<int>> tried;
  auto add = [&](const std::vector<int>& counts) {
    if (counts.empty() || std::find(tried.begin(), tried.end(), counts) != tried.end()) return;
    tried.push_back(counts);
    for (int spread = 1; spread >= (L.N > 1 ? 0 : 1); --spread) {
      Packer P = make(counts);
      pack_lpt(P, experts, spread != 0);
      improve_max(P);
      const double m = P.max_load();
      cands.push_back({std::move(P), m});
    }
  };
  auto lowest_max = [&] {
    double m = cands[0].max_load;
    for (const Candidate& c : cands) m = std::min(m, c.max_load);
    return m;
  };
  double total = 0;
  for (double x : w) total += x;
  add(r);
  add(replicate_for_coverage(w, experts, total_slots, cap, /*num_nodes=*/1, total / L.R, /*fill=*/false, m));
  if (L.N > 1) {
    add(replicate_for_coverage(w, experts, total_slots, cap, L.N, lowest_max() * (1 + L.tolerance), /*fill=*/true, m));
  }
  const double M = lowest_max();
  const double limit = M * (1 + L.tolerance);
  int best = -1;
  double best_cross = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    Candidate& c = cands[i];
    if (c.max_load > limit) continue;
    improve_cross(c.packer, experts, limit, L.N);
    c.max_load = c.packer.max_load();
    const double x = c.packer.crossing(experts);
    const double tol = kRelEps * std::max(x, best_cross);
    if (best < 0 || x < best_cross - tol ||
        (x <= best_cross + tol && c.max_load < cands[static_cast<size_t>(best)].max_load)) {
      best = static_cast<int>(i);
      best_cross = x;
    }
  }
  cands[static_cast<size_t>(best)].packer.emit(experts, out);
}

// With expert groups: groups packed onto nodes (equal counts), then each node planned
// on its own with its ranks and its groups' experts.
void plan_grouped(const std::vector<double>& w, const LayerShape& L, LayerPlan* out) {
  const int G = L.G, N = L.N, rpn = L.R / L.N, per_group = L.E / G, groups_per_node = G / N;
  std::vector<double> gload(static_cast<size_t>(G), 0.0);
  for (int e = 0; e < L.E; ++e) gload[static_cast<size_t>(e / per_group)] += w[static_cast<size_t>(e)];
  std::vector<int> gorder = iota_vec(0, G);
  std::stable_sort(gorder.begin(), gorder.end(),
                   [&](int a, int b) { return gload[static_cast<size_t>(a)] > gload[static_cast<size_t>(b)]; });
  std::vector<std::vector<int>> node_groups(static_cast<size_t>(N));
  std::vector<double> nload(static_cast<size_t>(N), 0.0);
  for (int g : gorder) {
    int best = -1;
    for (int n = 0; n < N; ++n) {
      if (static_cast<int>(node_groups[static_cast<size_t>(n)].size()) >= groups_per_node) continue;
      if (best < 0 || nload[static_cast<size_t>(n)] < nload[static_cast<size_t>(best)]) best = n;
    }
    node_groups[static_cast<size_t>(best)].push_back(g);
    nload[static_cast<size_t>(best)] += gload[static_cast<size_t>(g)];
  }
  if (L.algorithm == PlannerAlgorithm::kBalanced) {
    // Swap groups between the heaviest node and another while that lowers the heaviest.
    for (int iter = 0; iter < 64 * G + 64; ++iter) {
      const int hn = static_cast<int>(std::max_element(nload.begin(), nload.end()) - nload.begin());
      const double lh = nload[static_cast<size_t>(hn)];
      double best = lh - kRelEps * lh;
      int bn = -1;
      size_t bi = 0, bj = 0;
      for (int n = 0; n < N; ++n) {
        if (n == hn) continue;
        for (size_t i = 0; i < node_groups[static_cast<size_t>(hn)].size(); ++i) {
          for (size_t j = 0; j < node_groups[static_cast<size_t>(n)].size(); ++j) {
            const double d = gload[static_cast<size_t>(node_groups[static_cast<size_t>(hn)][i])] -
                             gload[static_cast<size_t>(node_groups[static_cast<size_t>(n)][j])];
            if (!(d > 0)) continue;
            const double v = std::max(lh - d, nload[static_cast<size_t>(n)] + d);
            if (v < best) {
              best = v;
              bn = n;
              bi = i;
              bj = j;
            }
          }
        }
      }
      if (bn < 0) break;
      auto& gh = node_groups[static_cast<size_t>(hn)];
      auto& gn = node_groups[static_cast<size_t>(bn)];
      const double d = gload[static_cast<size_t>(gh[bi])] - gload[static_cast<size_t>(gn[bj])];
      std::swap(gh[bi], gn[bj]);
      nload[static_cast<size_t>(hn)] -= d;
      nload[static_cast<size_t>(bn)] += d;
    }
  }
  const int S = std::min(L.S, L.E);
  const int cap = std::min(L.cap, rpn);
  for (int n = 0; n < N; ++n) {
    std::vector<int> experts;
    for (int g : node_groups[static_cast<size_t>(n)]) {
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) experts.push_back(e);
    }
    std::sort(experts.begin(), experts.end());
    const std::vector<int> r = replicate(w, experts, static_cast<int64_t>(rpn) * S, cap, L.min_replicas);
    Packer P(L.E, S, iota_vec(n * rpn, (n + 1) * rpn), std::vector<int>(static_cast<size_t>(rpn), 0), 1, w, r, cap,
             L.min_replicas, /*min_nodes=*/1);
    pack_lpt(P, experts, /*spread=*/false);
    if (L.algorithm == PlannerAlgorithm::kBalanced) improve_max(P);
    P.emit(experts, out);
  }
}

}  // namespace

Status validate_planner_input(const PlannerInput& in) {
  if (in.num_ranks < 1) return invalid_argument("num_ranks must be >= 1 (got " + std::to_string(in.num_ranks) + ")");
  if (in.num_nodes < 1) return invalid_argument("num_nodes must be >= 1 (got " + std::to_string(in.num_nodes) + ")");
  if (in.num_ranks % in.num_nodes != 0) {
    return invalid_argument("num_ranks " + std::to_string(in.num_ranks) + " is not divisible by num_nodes " + std::to_string(in.num_nodes) +
                            " (every node needs the same number of ranks)");
  }
  if (in.slots_per_rank < 1) return invalid_argument("slots_per_rank must be >= 1 (got " + std::to_string(in.slots_per_rank) + ")");
  if (in.replica_cap < 1) {
    return invalid_argument("replica_cap must be >= 1 (got " + std::to_string(in.replica_cap) +
                            "): every expert keeps at least one replica");
  }
  if (in.min_replicas < 1) {
    return invalid_argument("min_replicas must be >= 1 (got " + std::to_string(in.min_replicas) +
                            "): every expert keeps at least one replica");
  }
  if (in.min_replicas > in.replica_cap) {
    return invalid_argument("min_replicas " + std::to_string(in.min_replicas) + " exceeds replica_cap " +
                            std::to_string(in.replica_cap));
  }
  if (in.min_replicas > in.num_ranks) {
    return invalid_argument("min_replicas " + std::to_string(in.min_replicas) + " exceeds num_ranks " +
                            std::to_string(in.num_ranks) + " (replicas of one expert sit on distinct ranks)");
  }
  if (in.num_groups > 0 && in.min_replicas > in.num_ranks / in.num_nodes) {
    return invalid_argument("min_replicas " + std::to_string(in.min_replicas) + " exceeds the " +
                            std::to_string(in.num_ranks / in.num_nodes) +
                            " ranks per node (with num_groups, an expert's replicas all stay on its group's node)");
  }
  if (in.load.empty()) return invalid_argument("load has no layers");
  const size_t E = in.load[0].size();
  if (E == 0) return invalid_argument("load[0] has no experts");
  for (size_t l = 0; l < in.load.size(); ++l) {
    if (in.load[l].size() != E) {
      return invalid_argument("load[" + std::to_string(l) + "] has " + std::to_string(in.load[l].size()) +
                              " experts, expected " + std::to_string(E) + " (as load[0])");
    }
    for (size_t e = 0; e < E; ++e) {
      const double v = in.load[l][e];
      if (!std::isfinite(v) || v < 0) {
        return invalid_argument("load[" + std::to_string(l) + "][" + std::to_string(e) + "] is " + format_g(v) +
                                ": loads must be finite and >= 0");
      }
    }
  }
  if (!in.layer_ids.empty()) {
    if (in.layer_ids.size() != in.load.size()) {
      return invalid_argument("layer_ids has " + std::to_string(in.layer_ids.size()) + " entries but load has " +
                              std::to_string(in.load.size()) + " layers");
    }
    std::set<int> seen;
    for (int id : in.layer_ids) {
      if (id < 0) return invalid_argument("layer_ids: layer id " + std::to_string(id) + " is negative");
      if (!seen.insert(id).second) return invalid_argument("layer_ids: layer " + std::to_string(id) + " appears twice");
    }
  }
  const int64_t slots = static_cast<int64_t>(in.num_ranks) * in.slots_per_rank;
  if (slots < static_cast<int64_t>(E)) {
    const int64_t need = (static_cast<int64_t>(E) + in.num_ranks - 1) / in.num_ranks;
    return invalid_argument("num_ranks " + std::to_string(in.num_ranks) + " x slots_per_rank " + std::to_string(in.slots_per_rank) + " = " +
                            std::to_string(slots) + " slots cannot hold each of the " + std::to_string(E) +
                            " experts once (need slots_per_rank >= " + std::to_string(need) + ")");
  }
  const int64_t need_slots = static_cast<int64_t>(E) * in.min_replicas;
  if (slots < need_slots) {
    return invalid_argument("min_replicas " + std::to_string(in.min_replicas) + ": not enough slots: need " +
                            std::to_string(need_slots) + " (" + std::to_string(E) + " experts x " +
                            std::to_string(in.min_replicas) + "), have " + std::to_string(slots) + " (num_ranks " +
                            std::to_string(in.num_ranks) + " x slots_per_rank " + std::to_string(in.slots_per_rank) +
                            "; need slots_per_rank >= " +
                            std::to_string((need_slots + in.num_ranks - 1) / in.num_ranks) + ")");
  }
  if (!std::isfinite(in.max_load_tolerance) || in.max_load_tolerance < 0 || in.max_load_tolerance > 1) {
    return invalid_argument("max_load_tolerance must be in [0, 1] (got " + format_g(in.max_load_tolerance) + ")");
  }
  if (in.num_groups < 0) return invalid_argument("num_groups must be >= 0 (got " + std::to_string(in.num_groups) + ")");
  if (in.num_groups > 0) {
    if (E % static_cast<size_t>(in.num_groups) != 0) {
      return invalid_argument("num_groups " + std::to_string(in.num_groups) + " does not divide the " + std::to_string(E) +
                              " experts into equal groups");
    }
    if (in.num_groups % in.num_nodes != 0) {
      return invalid_argument("num_groups " + std::to_string(in.num_groups) + " is not a multiple of num_nodes " +
                              std::to_string(in.num_nodes) + " (each node gets whole groups, the same number each)");
    }
  }
  return ok_status();
}

StatusOr<PlacementPlan> plan_placement(const PlannerInput& in) {
  MOE_RETURN_IF_ERROR(validate_planner_input(in));
  PlacementPlan plan;
  plan.num_experts = static_cast<int>(in.load[0].size());
  plan.num_ranks = in.num_ranks;
  plan.slots_per_rank = in.slots_per_rank;
  const LayerShape shape{plan.num_experts, in.num_ranks,  in.num_nodes,  in.slots_per_rank, in.replica_cap,
                         in.num_groups,    in.min_replicas, in.algorithm, in.max_load_tolerance};
  for (size_t l = 0; l < in.load.size(); ++l) {
    LayerPlan L;
    L.layer = in.layer_ids.empty() ? static_cast<int>(l) : in.layer_ids[l];
    L.rank_slots.assign(static_cast<size_t>(in.num_ranks), {});
    L.replica_count.assign(static_cast<size_t>(plan.num_experts), 0);
    if (in.num_groups > 0) {
      plan_grouped(in.load[l], shape, &L);
    } else {
      plan_flat(in.load[l], shape, &L);
    }
    plan.layers.push_back(std::move(L));
  }
  Status st = validate_plan(plan);
  if (!st.ok()) return internal_error("placement planner produced an invalid plan (a bug): " + st.message());
  return plan;
}

PlacementPlan contiguous_plan(int num_experts, int num_ranks, const std::vector<int>& layer_ids) {
  PlacementPlan plan;
  plan.num_experts = num_experts;
  plan.num_ranks = num_ranks;
  plan.slots_per_rank = std::max(1, (num_experts + num_ranks - 1) / std::max(num_ranks, 1));
  const std::vector<int> ids = layer_ids.empty() ? std::vector<int>{0} : layer_ids;
  const ExpertPlacement contiguous = ExpertPlacement::contiguous(num_experts, num_ranks);
  for (int id : ids) plan.layers.push_back(to_layer_plan(contiguous, id));
  return plan;
}

}  // namespace moe
