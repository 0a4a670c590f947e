#include "moe/placement/failover_placement.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "moe/core/check.h"

namespace moe {

StatusOr<ExpertPlacement> survivor_placement(const ExpertPlacement& old, const std::vector<int>& members) {
  if (members.empty()) return invalid_argument("survivor placement: no surviving rank (members is empty)");
  for (size_t i = 0; i < members.size(); ++i) {
    const int r = members[i];
    if (r < 0 || r >= old.num_ranks()) {
      return invalid_argument("survivor placement: members[" + std::to_string(i) + "] = " + std::to_string(r) +
                              " is not a rank of the old group [0, " + std::to_string(old.num_ranks()) + ")");
    }
    if (i > 0 && r <= members[i - 1]) {
      return invalid_argument("survivor placement: members must be strictly ascending (members[" +
                              std::to_string(i) + "] = " + std::to_string(r) + " after " +
                              std::to_string(members[i - 1]) + ")");
    }
  }
  std::vector<std::vector<int>> slots;
  slots.reserve(members.size());
  for (int r : members) slots.push_back(old.experts_on(r));
  return ExpertPlacement::from_rank_slots(slots, old.num_experts(), LostExperts::kAllow);
}

StatusOr<ExpertPlacement> rereplication_target(const ExpertPlacement& degraded, int slots_per_rank,
                                               const std::vector<double>& expert_load) {
  const int E = degraded.num_experts(), R = degraded.num_ranks();
  if (slots_per_rank < 1) {
    return invalid_argument("re-replication: slots_per_rank must be >= 1 (got " + std::to_string(slots_per_rank) + ")");
  }
  if (!expert_load.empty() && expert_load.size() != static_cast<size_t>(E)) {
    return invalid_argument("re-replication: expert_load has " + std::to_string(expert_load.size()) +
                            " entries for " + std::to_string(E) + " experts");
  }
  for (size_t e = 0; e < expert_load.size(); ++e) {
    if (!std::isfinite(expert_load[e]) || expert_load[e] < 0) {
      return invalid_argument("re-replication: expert_load[" + std::to_string(e) + "] = " +
                              std::to_string(expert_load[e]) + " must be finite and >= 0");
    }
  }
  std::vector<int> lost = degraded.lost_experts();
  if (lost.empty()) return degraded;
  auto load_of = [&](int e) { return expert_load.empty() ? 0.0 : expert_load[static_cast<size_t>(e)]; };
  std::stable_sort(lost.begin(), lost.end(), [&](int a, int b) { return load_of(a) > load_of(b); });

  std::vector<std::vector<int>> slots = degraded.rank_slots();
  std::vector<double> rank_load(static_cast<size_t>(R), 0.0);
  const std::vector<int> copies = degraded.replica_counts();
  for (int r = 0; r < R; ++r) {
    for (int e : slots[static_cast<size_t>(r)]) rank_load[static_cast<size_t>(r)] += load_of(e) / copies[static_cast<size_t>(e)];
  }
  for (int e : lost) {
    // Most free slots (= fewest experts held, the budget being the same on every rank);
    // with no free slot anywhere the same order picks the rank holding the fewest.
    int best = 0;
    for (int r = 1; r < R; ++r) {
      const size_t held_r = slots[static_cast<size_t>(r)].size(), held_b = slots[static_cast<size_t>(best)].size();
      if (held_r < held_b || (held_r == held_b && rank_load[static_cast<size_t>(r)] < rank_load[static_cast<size_t>(best)])) {
        best = r;
      }
    }
    slots[static_cast<size_t>(best)].push_back(e);
    rank_load[static_cast<size_t>(best)] += load_of(e);
  }
  for (auto& s : slots) std::sort(s.begin(), s.end());
  return ExpertPlacement::from_rank_slots(slots, E);
}

std::vector<ReplicaAddition> added_replicas(const ExpertPlacement& from, const ExpertPlacement& to) {
  MOE_CHECK(from.num_experts() == to.num_experts() && from.num_ranks() == to.num_ranks());
  std::vector<ReplicaAddition> out;
  for (int e = 0; e < to.num_experts(); ++e) {
    for (int r : to.replicas(e)) {
      if (!from.holds(r, e)) out.push_back({e, r});
    }
  }
  return out;
}

}  // namespace moe
