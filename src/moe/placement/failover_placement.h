// Placement after a rank failure (docs/reliability.md): the survivors' placement, where an
// expert whose every replica was on a dead rank is lost (the router then sends its
// tokens to their next-best live expert: degraded mode), and the re-replication target
// that gives each lost expert one replica on a survivor.
//
// Pure functions of their arguments: every surviving rank computes the same result.
#pragma once

#include <vector>

#include "moe/placement/expert_placement.h"
#include "moe/status.h"

namespace moe {

// The placement over the surviving ranks. `members`: the old ranks that survive,
// strictly ascending, each in [0, old.num_ranks()); new rank i is old rank members[i]
// (the communicator re-formed with ranks renumbered in that order). Replicas on dead
// ranks are removed; an expert left with none is lost (is_lost). InvalidArgument
// naming the entry for an empty, unsorted, duplicate or out-of-range `members`.
StatusOr<ExpertPlacement> survivor_placement(const ExpertPlacement& old, const std::vector<int>& members);

// The placement that re-replicates every lost expert of `degraded` once, onto a survivor.
// Existing replicas never move. Lost experts are placed one at a time, the heaviest
// first (expert_load descending, ties: lower id; by id alone when expert_load is empty);
// each goes to the rank with the most free slots (slots_per_rank minus the experts it
// holds, counting the ones placed so far), ties to the lower load (the sum over its
// experts of expert_load[e] / replicas of e), then the lower rank. When no rank has a
// free slot the expert goes to the rank holding the fewest experts (same ties): that
// rank then EXCEEDS slots_per_rank by one (outputs must become exact again even
// without room; the caller sees it in max_experts_per_rank()).
//   slots_per_rank: >= 1, the expert memory budget per rank (in experts)
//   expert_load:    [num_experts] load per expert (e.g. ExpertLoadStats::ema of the
//                   layer), >= 0 and finite, or empty (all equal)
// Returns `degraded` itself when nothing is lost. InvalidArgument naming the argument
// for slots_per_rank < 1, an expert_load of the wrong size or with a negative or
// non-finite entry.
StatusOr<ExpertPlacement> rereplication_target(const ExpertPlacement& degraded, int slots_per_rank,
                                               const std::vector<double>& expert_load);

// One replica that `to` has and `from` lacks: the expert weights rank `rank` must load
// (from the expert store or a peer) to move from `from` to `to`.
struct ReplicaAddition {
  int expert = 0;
  int rank = 0;
  bool operator==(const ReplicaAddition&) const = default;
};
// Every replica of `to` missing in `from`, by expert then rank ascending. Both
// placements must have the same num_experts and num_ranks (MOE_CHECK).
std::vector<ReplicaAddition> added_replicas(const ExpertPlacement& from, const ExpertPlacement& to);

}  // namespace moe
