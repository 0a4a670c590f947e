#include "moe/placement/expert_placement.h"

namespace moe {

ExpertPlacement ExpertPlacement::contiguous(int num_experts, int num_ranks) {
  ExpertPlacement p;
  p.num_ranks_ = num_ranks;
  p.expert_rank_.resize(static_cast<size_t>(num_experts));
  for (int r = 0; r < num_ranks; ++r) {
    const int begin = static_cast<int>(static_cast<int64_t>(r) * num_experts / num_ranks);
    const int end = static_cast<int>(static_cast<int64_t>(r + 1) * num_experts / num_ranks);
    for (int e = begin; e < end; ++e) p.expert_rank_[static_cast<size_t>(e)] = r;
  }
  return p;
}

StatusOr<ExpertPlacement> ExpertPlacement::from_map(std::vector<int> expert_rank, int num_ranks) {
  if (num_ranks < 1) return invalid_argument("placement needs at least one rank (got " + std::to_string(num_ranks) + ")");
  for (size_t e = 0; e < expert_rank.size(); ++e) {
    if (expert_rank[e] < 0 || expert_rank[e] >= num_ranks) {
      return invalid_argument("placement puts expert " + std::to_string(e) + " on rank " +
                              std::to_string(expert_rank[e]) + ", outside [0, " + std::to_string(num_ranks) + ")");
    }
  }
  ExpertPlacement p;
  p.expert_rank_ = std::move(expert_rank);
  p.num_ranks_ = num_ranks;
  return p;
}

std::vector<int> ExpertPlacement::experts_on(int rank) const {
  std::vector<int> out;
  for (size_t e = 0; e < expert_rank_.size(); ++e) {
    if (expert_rank_[e] == rank) out.push_back(static_cast<int>(e));
  }
  return out;
}

}  // namespace moe
