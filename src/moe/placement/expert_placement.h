// Where each logical expert lives: expert -> the ranks holding a copy (replicas).
//
// Normally every expert has at least one replica; a rank holds an expert at most once.
// After a rank failure an expert may have none: it is "lost" (is_lost), allowed only by
// from_rank_slots(..., LostExperts::kAllow) and survivor_placement (failover_placement.h);
// the router never selects a lost expert (degraded mode, router.h). Which replica
// computes a given token is chosen at dispatch time (replica_choice.h).
//
// The one placement type of one layer: the EP layer reads it, and a plan file's layer
// (placement_plan.h: LayerPlan, the serialised form) converts to it with
// layer_placement(); the contiguous rule lives here only (contiguous_expert_range).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/core/check.h"
#include "moe/status.h"

namespace moe {

// The contiguous rule: rank `rank` of num_ranks holds experts [begin, end) =
// [floor(rank*E/R), floor((rank+1)*E/R)), so 8 experts over 3 ranks -> {0,1}, {2,3,4},
// {5,6,7}; with more ranks than experts some ranks hold none. Requires num_ranks >= 1.
struct ExpertRange {
  int begin = 0;
  int end = 0;
};
ExpertRange contiguous_expert_range(int rank, int num_experts, int num_ranks);

// Whether a factory accepts an expert held by no rank.
enum class LostExperts { kRefuse, kAllow };

class ExpertPlacement {
 public:
  ExpertPlacement() = default;

  // Contiguous blocks, one copy each (contiguous_expert_range).
  static ExpertPlacement contiguous(int num_experts, int num_ranks);
  // One copy each, any map: expert_rank[e] in [0, num_ranks). InvalidArgument naming
  // the expert otherwise.
  static StatusOr<ExpertPlacement> from_map(std::vector<int> expert_rank, int num_ranks);
  // Any layout with replicas: rank_slots[r] lists the logical experts rank r holds
  // (num_ranks = rank_slots.size()). InvalidArgument naming the rank and expert for an
  // id outside [0, num_experts), an expert listed twice on one rank, or (unless `lost`
  // is kAllow) an expert on no rank.
  static StatusOr<ExpertPlacement> from_rank_slots(const std::vector<std::vector<int>>& rank_slots, int num_experts,
                                                   LostExperts lost = LostExperts::kRefuse);

  int num_experts() const { return static_cast<int>(replicas_.size()); }
  int num_ranks() const { return num_ranks_; }
  // The first (lowest) rank holding `expert`. The expert must not be lost (MOE_CHECK:
  // a caller that may meet lost experts checks is_lost first).
  int rank_of(int expert) const {
    const auto& reps = replicas_[static_cast<size_t>(expert)];
    MOE_CHECK(!reps.empty());
    return reps.front();
  }
  // Ranks holding `expert`, ascending (empty for a lost expert).
  const std::vector<int>& replicas(int expert) const { return replicas_[static_cast<size_t>(expert)]; }
  // Lost experts: held by no rank.
  bool is_lost(int expert) const { return replicas_[static_cast<size_t>(expert)].empty(); }
  int num_lost() const;
  std::vector<int> lost_experts() const;  // ascending
  // [num_experts] 1 = the expert has a replica, 0 = lost (the router's expert_alive mask).
  std::vector<uint8_t> alive_mask() const;
  bool holds(int rank, int expert) const;
  bool has_replicas() const { return has_replicas_; }
  // Experts held by `rank`, ascending.
  std::vector<int> experts_on(int rank) const;
  // experts_on(r) for every rank: [num_ranks][experts on the rank], ascending (the
  // rank_slots of a plan file's layer).
  std::vector<std::vector<int>> rank_slots() const;
  // [num_experts] number of ranks holding each expert.
  std::vector<int> replica_counts() const;
  // Expert slots used on the busiest rank.
  int max_experts_per_rank() const;
  bool operator==(const ExpertPlacement& other) const {
    return num_ranks_ == other.num_ranks_ && replicas_ == other.replicas_;
  }

 private:
  std::vector<std::vector<int>> replicas_;  // [num_experts] ranks ascending
  int num_ranks_ = 1;
  bool has_replicas_ = false;
};

}  // namespace moe
