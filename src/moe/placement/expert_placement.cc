#include "moe/placement/expert_placement.h"

#include <algorithm>

namespace moe {

ExpertRange contiguous_expert_range(int rank, int num_experts, int num_ranks) {
  return {static_cast<int>(static_cast<int64_t>(rank) * num_experts / num_ranks),
          static_cast<int>(static_cast<int64_t>(rank + 1) * num_experts / num_ranks)};
}

ExpertPlacement ExpertPlacement::contiguous(int num_experts, int num_ranks) {
  ExpertPlacement p;
  p.num_ranks_ = num_ranks;
  p.replicas_.resize(static_cast<size_t>(num_experts));
  for (int r = 0; r < num_ranks; ++r) {
    const ExpertRange range = contiguous_expert_range(r, num_experts, num_ranks);
    for (int e = range.begin; e < range.end; ++e) p.replicas_[static_cast<size_t>(e)] = {r};
  }
  return p;
}

StatusOr<ExpertPlacement> ExpertPlacement::from_map(std::vector<int> expert_rank, int num_ranks) {
  if (num_ranks < 1) return invalid_argument("placement needs at least one rank (got " + std::to_string(num_ranks) + ")");
  ExpertPlacement p;
  p.num_ranks_ = num_ranks;
  p.replicas_.resize(expert_rank.size());
  for (size_t e = 0; e < expert_rank.size(); ++e) {
    if (expert_rank[e] < 0 || expert_rank[e] >= num_ranks) {
      return invalid_argument("placement puts expert " + std::to_string(e) + " on rank " +
                              std::to_string(expert_rank[e]) + ", outside [0, " + std::to_string(num_ranks) + ")");
    }
    p.replicas_[e] = {expert_rank[e]};
  }
  return p;
}

StatusOr<ExpertPlacement> ExpertPlacement::from_rank_slots(const std::vector<std::vector<int>>& rank_slots,
                                                           int num_experts, LostExperts lost) {
  if (rank_slots.empty()) return invalid_argument("placement needs at least one rank");
  ExpertPlacement p;
  p.num_ranks_ = static_cast<int>(rank_slots.size());
  p.replicas_.resize(static_cast<size_t>(num_experts));
  for (size_t r = 0; r < rank_slots.size(); ++r) {
    for (int e : rank_slots[r]) {
      if (e < 0 || e >= num_experts) {
        return invalid_argument("placement puts expert " + std::to_string(e) + " on rank " + std::to_string(r) +
                                ", but the model has experts [0, " + std::to_string(num_experts) + ")");
      }
      auto& reps = p.replicas_[static_cast<size_t>(e)];
      if (!reps.empty() && reps.back() == static_cast<int>(r)) {
        return invalid_argument("placement lists expert " + std::to_string(e) + " twice on rank " + std::to_string(r));
      }
      reps.push_back(static_cast<int>(r));
    }
  }
  for (int e = 0; e < num_experts; ++e) {
    const auto& reps = p.replicas_[static_cast<size_t>(e)];
    if (reps.empty() && lost == LostExperts::kRefuse) return invalid_argument("placement leaves expert " + std::to_string(e) + " on no rank");
    p.has_replicas_ |= reps.size() > 1;
  }
  return p;
}

int ExpertPlacement::num_lost() const {
  return static_cast<int>(std::count_if(replicas_.begin(), replicas_.end(), [](const auto& r) { return r.empty(); }));
}

std::vector<int> ExpertPlacement::lost_experts() const {
  std::vector<int> out;
  for (size_t e = 0; e < replicas_.size(); ++e) {
    if (replicas_[e].empty()) out.push_back(static_cast<int>(e));
  }
  return out;
}

std::vector<uint8_t> ExpertPlacement::alive_mask() const {
  std::vector<uint8_t> out(replicas_.size());
  for (size_t e = 0; e < replicas_.size(); ++e) out[e] = replicas_[e].empty() ? 0 : 1;
  return out;
}

bool ExpertPlacement::holds(int rank, int expert) const {
  const auto& reps = replicas_[static_cast<size_t>(expert)];
  return std::binary_search(reps.begin(), reps.end(), rank);
}

std::vector<int> ExpertPlacement::experts_on(int rank) const {
  std::vector<int> out;
  for (size_t e = 0; e < replicas_.size(); ++e) {
    if (holds(rank, static_cast<int>(e))) out.push_back(static_cast<int>(e));
  }
  return out;
}

std::vector<std::vector<int>> ExpertPlacement::rank_slots() const {
  std::vector<std::vector<int>> out(static_cast<size_t>(num_ranks_));
  for (size_t e = 0; e < replicas_.size(); ++e) {
    for (int r : replicas_[e]) out[static_cast<size_t>(r)].push_back(static_cast<int>(e));
  }
  return out;
}

std::vector<int> ExpertPlacement::replica_counts() const {
  std::vector<int> out(replicas_.size());
  for (size_t e = 0; e < replicas_.size(); ++e) out[e] = static_cast<int>(replicas_[e].size());
  return out;
}

int ExpertPlacement::max_experts_per_rank() const {
  std::vector<int> count(static_cast<size_t>(num_ranks_), 0);
  for (const auto& reps : replicas_) {
    for (int r : reps) ++count[static_cast<size_t>(r)];
  }
  return count.empty() ? 0 : *std::max_element(count.begin(), count.end());
}

}  // namespace moe
