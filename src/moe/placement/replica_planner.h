// The expert placement planner: per-layer expert load -> which logical expert sits in
// each physical slot of each rank (placement_plan.h), replicating hot experts.
//
// Model (what the objective assumes):
//  - An expert's load is split evenly over its replicas: a rank's load is
//    sum over the experts e it holds of load[e] / replica_count[e] (what the
//    dispatcher's replica balancing approximates).
//  - Tokens originate uniformly on all ranks (data-parallel attention) and the
//    dispatcher prefers a replica on the same rank, else on the same node, else a remote
//    one; so an assignment to expert e from a node crosses a node boundary iff that node
//    holds no replica of e: cross-node share = sum_e load[e] * (nodes without e / nodes)
//    / sum_e load[e]. Nodes are consecutive blocks of num_ranks / num_nodes ranks.
//
// Objective: minimise the maximum rank load, then the cross-node share. Constraints:
// every expert keeps >= min_replicas replicas (default 1), at most min(replica_cap,
// num_ranks) replicas on distinct ranks, at most slots_per_rank experts per rank.
//
// Fault tolerance (min_replicas = k): the k replicas are on k distinct ranks, so losing
// any k - 1 ranks leaves every expert a live replica (what the engine's peer recovery
// and failover need). Without num_groups they are also spread over min(k, num_nodes)
// distinct nodes, so with k >= 2 and several nodes a node loss keeps a replica too:
// packing puts an expert's first replicas on nodes that lack it, and if that misses for
// some expert the replicas are dealt round-robin over ranks interleaved by node instead
// (always possible); no later move, swap or drop breaks either floor. With num_groups an
// expert's replicas all stay on its group's node (k <= ranks per node): rank losses are
// covered, a node loss is not. Every replica count below starts at k; the objective is
// unchanged (the load splits evenly over however many replicas an expert has).
//
// Algorithms (PlannerAlgorithm):
//  kBalanced (default): several candidate plans, each built as (1) replica counts,
//    (2) packing: replicas by load descending, each onto the least-loaded rank with a
//    free slot that does not hold the expert (LPT; with several nodes once more while
//    preferring nodes that lack the expert), (3) local search on the most-loaded rank:
//    move a replica to a free slot, swap it with a smaller one, drop a replica (its
//    siblings take its share; never below min_replicas) or add one in a free slot, while that lowers the maximum.
//    Replica counts: (a) greedy: one more replica for the expert with the largest load
//    per replica while slots remain (EPLB's rule; every slot used); (b) the fewest
//    replicas that keep each at or below the mean rank load (free slots stay free, so a
//    rank holding a big replica is not forced to take more); (c) with several nodes,
//    (b) for the best max so far, then replicas of the hottest experts up to one per
//    node, then (a). Of the candidates within max_load_tolerance of the lowest max, each
//    gets (4) a cross-node pass (free slots take replicas of hot experts their node
//    lacks; moves and swaps across nodes that reduce crossing; no rank above the
//    tolerance), and the lowest cross-node share wins.
//  kEplb: a DeepSeek EPLB-style baseline: the same greedy replication, then balanced
//    packing (replicas by load descending onto the least-loaded rank with a free slot)
//    and nothing else. EPLB itself neither caps replicas nor keeps replicas of one
//    expert on distinct ranks; here both constraints hold, as the plan format needs.
//  With num_groups > 0 both are hierarchical like EPLB's: the groups (num_experts /
//  num_groups consecutive experts each) are packed onto nodes, num_groups / num_nodes
//  per node, and each expert with all of its replicas stays on its group's node (cap
//  also <= ranks per node); each node is then planned on its own (kBalanced also swaps
//  groups between nodes to even their loads and runs the local search (3) per node;
//  kEplb packs each node's replicas as above). This keeps DeepSeek's
//  group-limited routing node-local; in the cross-node model above every expert is then
//  on exactly one node.
//
// Deterministic: the same input gives the same plan; ties go to the lowest expert id,
// then the lowest rank.
#pragma once

#include <string>
#include <vector>

#include "moe/placement/load_matrix.h"
#include "moe/placement/placement_plan.h"
#include "moe/placement/plan_metrics.h"
#include "moe/status.h"

namespace moe {

enum class PlannerAlgorithm { kBalanced, kEplb };

struct PlannerInput {
  std::vector<std::vector<double>> load;  // [layers][experts], finite, >= 0
  std::vector<int> layer_ids;             // model layer id per row; empty: 0, 1, ...
  int num_ranks = 1;
  int num_nodes = 1;                      // must divide num_ranks
  int slots_per_rank = 0;                 // num_ranks * slots_per_rank >= num_experts
  int replica_cap = 4;                    // >= 1
  int num_groups = 0;                     // 0 = no expert groups; else divides num_experts, multiple of num_nodes
  // Fewest replicas of every expert, on distinct ranks (see the top): 1 <= min_replicas
  // <= min(replica_cap, num_ranks) (<= ranks per node with num_groups), and
  // num_ranks * slots_per_rank >= num_experts * min_replicas.
  int min_replicas = 1;
  PlannerAlgorithm algorithm = PlannerAlgorithm::kBalanced;
  // kBalanced: plans whose max rank load is within this fraction of the lowest max found
  // count as equally balanced, and the lowest cross-node share among them wins (the
  // cross-node pass may use that headroom too). 0 = strictly max first.
  double max_load_tolerance = 1e-3;
};

// InvalidArgument naming the field (num_ranks, num_nodes, slots_per_rank, replica_cap,
// min_replicas, num_groups, load[l][e], layer_ids) and the problem, e.g. "min_replicas 2:
// not enough slots: need 16 (8 experts x 2), have 12 (...)".
Status validate_planner_input(const PlannerInput& in);

// The plan (validate_plan holds for it); slots_per_rank of the plan = the input's.
StatusOr<PlacementPlan> plan_placement(const PlannerInput& in);

// The one-copy baseline: rank r holds experts [floor(r*E/R), floor((r+1)*E/R)) in every
// layer (slots_per_rank = ceil(E/R)); layer_ids empty means one layer, id 0.
PlacementPlan contiguous_plan(int num_experts, int num_ranks, const std::vector<int>& layer_ids);

}  // namespace moe
