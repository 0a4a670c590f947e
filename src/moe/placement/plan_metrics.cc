// Plan metrics (plan_metrics.h): per-rank load, max/mean and cross-node
// share of a plan on a load matrix, and the lower bound on the max rank load.
#include "moe/placement/plan_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "moe/core/check.h"
#include "moe/placement/replica_packing.h"

namespace moe {

using placement_detail::iota_vec;
using placement_detail::replicate;

std::vector<double> rank_loads(const LayerPlan& layer, const std::vector<double>& load, int num_ranks) {
  std::vector<double> out(static_cast<size_t>(num_ranks), 0.0);
  for (size_t r = 0; r < layer.rank_slots.size() && r < out.size(); ++r) {
    for (int e : layer.rank_slots[r]) {
      out[r] += load[static_cast<size_t>(e)] / layer.replica_count[static_cast<size_t>(e)];
    }
  }
  return out;
}

LayerMetrics evaluate_layer(const LayerPlan& layer, const std::vector<double>& load, int num_ranks, int num_nodes) {
  MOE_CHECK(num_ranks >= 1 && num_nodes >= 1 && num_ranks % num_nodes == 0);
  MOE_CHECK(layer.replica_count.size() == load.size() && layer.rank_slots.size() == static_cast<size_t>(num_ranks));
  LayerMetrics m;
  for (double x : load) m.total_load += x;
  const std::vector<double> ranks = rank_loads(layer, load, num_ranks);
  m.max_load = *std::max_element(ranks.begin(), ranks.end());
  m.mean_load = m.total_load / num_ranks;
  m.max_over_mean = m.total_load > 0 ? m.max_load / m.mean_load : 1.0;
  if (num_nodes > 1 && m.total_load > 0) {
    const int rpn = num_ranks / num_nodes;
    const size_t E = load.size();
    std::vector<uint8_t> covered(static_cast<size_t>(num_nodes) * E, 0);
    for (int r = 0; r < num_ranks; ++r) {
      for (int e : layer.rank_slots[static_cast<size_t>(r)]) {
        covered[static_cast<size_t>(r / rpn) * E + static_cast<size_t>(e)] = 1;
      }
    }
    double crossing = 0;
    for (size_t e = 0; e < E; ++e) {
      int uncovered = 0;
      for (int n = 0; n < num_nodes; ++n) uncovered += covered[static_cast<size_t>(n) * E + e] ? 0 : 1;
      crossing += load[e] * uncovered;
    }
    m.cross_node_share = crossing / num_nodes / m.total_load;
  }
  return m;
}

double max_load_lower_bound(const std::vector<double>& load, int num_ranks, int slots_per_rank, int replica_cap) {
  if (load.empty() || num_ranks < 1) return 0;
  const int E = static_cast<int>(load.size());
  double total = 0;
  for (double x : load) total += x;
  const std::vector<int> r =
      replicate(load, iota_vec(0, E), static_cast<int64_t>(num_ranks) * std::min(std::max(slots_per_rank, 1), E),
                std::max(1, std::min(replica_cap, num_ranks)));
  double per_replica = 0;
  for (int e = 0; e < E; ++e) per_replica = std::max(per_replica, load[static_cast<size_t>(e)] / r[static_cast<size_t>(e)]);
  double bound = std::max(total / num_ranks, per_replica);
  const int S = std::min(std::max(slots_per_rank, 1), E);
  if (static_cast<int64_t>(num_ranks) * S == E && S > 1) {
    // No spare slot: every rank holds exactly S experts, one copy each, so the hottest
    // expert shares its rank with at least the S - 1 coldest others.
    std::vector<double> sorted = load;
    std::sort(sorted.begin(), sorted.end());
    double with_coldest = sorted.back();
    for (int i = 0; i < S - 1; ++i) with_coldest += sorted[static_cast<size_t>(i)];
    bound = std::max(bound, with_coldest);
  }
  return bound;
}

StatusOr<PlanMetrics> evaluate_plan(const PlacementPlan& plan, const std::vector<std::vector<double>>& load,
                                    int num_nodes) {
  if (num_nodes < 1 || plan.num_ranks % num_nodes != 0) {
    return invalid_argument("num_ranks " + std::to_string(plan.num_ranks) + " is not divisible by num_nodes " + std::to_string(num_nodes));
  }
  if (plan.layers.size() != load.size()) {
    return invalid_argument("the plan has " + std::to_string(plan.layers.size()) + " layers but the load has " +
                            std::to_string(load.size()));
  }
  MOE_RETURN_IF_ERROR(validate_plan(plan));
  PlanMetrics pm;
  double sum_max = 0, sum_mean = 0, crossing = 0, total = 0;
  for (size_t l = 0; l < load.size(); ++l) {
    if (load[l].size() != static_cast<size_t>(plan.num_experts)) {
      return invalid_argument("load layer " + std::to_string(l) + " has " + std::to_string(load[l].size()) +
                              " experts but the plan has num_experts " + std::to_string(plan.num_experts));
    }
    LayerMetrics m = evaluate_layer(plan.layers[l], load[l], plan.num_ranks, num_nodes);
    sum_max += m.max_load;
    sum_mean += m.mean_load;
    crossing += m.cross_node_share * m.total_load;
    total += m.total_load;
    pm.worst_layer_max_over_mean = std::max(pm.worst_layer_max_over_mean, m.max_over_mean);
    pm.layers.push_back(m);
  }
  pm.max_over_mean = sum_mean > 0 ? sum_max / sum_mean : 1.0;
  pm.cross_node_share = total > 0 ? crossing / total : 0.0;
  return pm;
}

}  // namespace moe
