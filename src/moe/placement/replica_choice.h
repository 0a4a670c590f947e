// Replica choice at dispatch time: for each (token, expert) assignment of this rank,
// the rank whose copy of the expert computes it.
//
// Locality first: this rank if it holds the expert, else a replica on this rank's node,
// else a remote one. Among candidates of the same tier, the rank with the fewest
// assignments this rank has already sent it in this step wins (ties: lower rank).
// Deterministic: depends only on the routing, the placement and the topology, so
// results never depend on timing. Every replica holds identical weights, so the choice
// changes only where (and in which f32 summation order) an expert runs.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/placement/expert_placement.h"

namespace moe {

// topk_idx: [num_tokens, top_k] (entries < 0 are dropped assignments: -1 out; so is
// a lost expert, which has no replica);
// rank_node: [num_ranks] node of each rank; assign_rank: [num_tokens, top_k] out.
// `load` is scratch ([num_ranks] after the call: assignments sent to each rank).
void choose_replicas(const ExpertPlacement& placement, const int* topk_idx, int64_t num_tokens, int top_k, int me,
                     const std::vector<int>& rank_node, std::vector<int64_t>* load, int* assign_rank);

// The replica of `expert` on node `node` that a gateway forwards to: `me` if it holds
// one, else the one with the lowest load[] (ties: lower rank), load[] incremented.
// -1 if the node holds no replica.
int choose_replica_on_node(const ExpertPlacement& placement, int expert, int node, int me,
                           const std::vector<int>& rank_node, std::vector<int64_t>* load);

}  // namespace moe
