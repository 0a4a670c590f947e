// Where each logical expert lives: expert -> rank (one copy each for now; replicas
// come with the replication planner).
#pragma once

#include <string>
#include <vector>

#include "moe/status.h"

namespace moe {

class ExpertPlacement {
 public:
  ExpertPlacement() = default;

  // Contiguous blocks: rank r holds experts [floor(r*E/R), floor((r+1)*E/R)), so
  // 8 experts over 3 ranks -> {0,1}, {2,3,4}, {5,6,7} (sizes differ by at most one);
  // with more ranks than experts some ranks hold none.
  static ExpertPlacement contiguous(int num_experts, int num_ranks);
  // Any map: expert_rank[e] in [0, num_ranks). InvalidArgument naming the expert otherwise.
  static StatusOr<ExpertPlacement> from_map(std::vector<int> expert_rank, int num_ranks);

  int num_experts() const { return static_cast<int>(expert_rank_.size()); }
  int num_ranks() const { return num_ranks_; }
  int rank_of(int expert) const { return expert_rank_[static_cast<size_t>(expert)]; }
  const std::vector<int>& expert_rank() const { return expert_rank_; }
  // Experts held by `rank`, ascending.
  std::vector<int> experts_on(int rank) const;

 private:
  std::vector<int> expert_rank_;
  int num_ranks_ = 1;
};

}  // namespace moe
