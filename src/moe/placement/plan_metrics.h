// How good a placement plan is on a load matrix (the model of replica_planner.h: an
// expert's load split evenly over its replicas; tokens from every rank): per-rank load,
// max/mean, the share of load crossing nodes, and a lower bound on the max rank load.
#pragma once

#include <vector>

#include "moe/placement/placement_plan.h"
#include "moe/status.h"

namespace moe {

struct LayerMetrics {
  double max_load = 0;          // the most-loaded rank
  double mean_load = 0;         // total / num_ranks
  double max_over_mean = 1;     // 1 when the layer has no load
  double cross_node_share = 0;  // fraction of the load that crosses nodes (model above)
  double total_load = 0;
};

// Per-rank load under the even-split assumption ([num_ranks]).
std::vector<double> rank_loads(const LayerPlan& layer, const std::vector<double>& load, int num_ranks);
// `layer` must be valid for load.size() experts and num_ranks ranks; num_nodes divides
// num_ranks (a bug otherwise, MOE_CHECK).
LayerMetrics evaluate_layer(const LayerPlan& layer, const std::vector<double>& load, int num_ranks, int num_nodes);
// A lower bound on any plan's max rank load: max(total / num_ranks, m) where m is the
// smallest possible largest load per replica, max_e load[e] / replicas[e], with
// num_ranks * min(slots_per_rank, experts) replicas in all and at most
// min(replica_cap, num_ranks) per expert (greedy replication attains it). With no spare
// slot (num_ranks * slots == experts) also the hottest expert plus the slots - 1 coldest.
double max_load_lower_bound(const std::vector<double>& load, int num_ranks, int slots_per_rank, int replica_cap);

struct PlanMetrics {
  std::vector<LayerMetrics> layers;  // parallel to the plan's layers
  // Layers run one after another, each as slow as its most-loaded rank:
  // sum of per-layer max / sum of per-layer mean.
  double max_over_mean = 1;
  double worst_layer_max_over_mean = 1;
  double cross_node_share = 0;  // crossing load / total load over all layers
};
// Evaluates plan.layers[i] against load[i]. InvalidArgument when the shapes disagree.
StatusOr<PlanMetrics> evaluate_plan(const PlacementPlan& plan, const std::vector<std::vector<double>>& load,
                                    int num_nodes);

}  // namespace moe
