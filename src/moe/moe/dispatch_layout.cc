#include "moe/moe/dispatch_layout.h"

#include <string>

namespace moe {

Status compute_dispatch_layout(const TopkRoutingView& routing, const ExpertPlacement& placement, DispatchLayout* L,
                               const int* assign_rank) {
  const int* topk_idx = routing.topk_idx;
  const float* topk_weights = routing.topk_weights;
  const int num_tokens = static_cast<int>(routing.num_tokens);
  const int top_k = routing.num_topk;
  // The rank computing assignment i: the chosen replica, or the expert's only rank.
  auto dest = [&](int64_t i, int e) { return assign_rank != nullptr ? assign_rank[i] : placement.rank_of(e); };
  const int num_ranks = placement.num_ranks();
  const int num_experts = placement.num_experts();
  L->num_tokens = num_tokens;
  L->top_k = top_k;
  L->num_ranks = num_ranks;
  L->num_tokens_per_rank.assign(static_cast<size_t>(num_ranks), 0);
  L->num_tokens_per_expert.assign(static_cast<size_t>(num_experts), 0);
  L->is_token_in_rank.assign(static_cast<size_t>(num_tokens) * static_cast<size_t>(num_ranks), 0);

  for (int t = 0; t < num_tokens; ++t) {
    const int* row = topk_idx + static_cast<int64_t>(t) * top_k;
    for (int j = 0; j < top_k; ++j) {
      const int e = row[j];
      if (e == kDroppedExpert) continue;
      if (e < 0 || e >= num_experts) {
        return invalid_argument("token " + std::to_string(t) + " slot " + std::to_string(j) + ": expert id " +
                                std::to_string(e) + " outside [0, " + std::to_string(num_experts) + ")");
      }
      for (int i = 0; i < j; ++i) {
        if (row[i] == e) {
          return invalid_argument("token " + std::to_string(t) + " lists expert " + std::to_string(e) +
                                  " twice in its top-" + std::to_string(top_k) + " (slots " + std::to_string(i) +
                                  " and " + std::to_string(j) + ")");
        }
      }
      if (placement.is_lost(e)) {
        return invalid_argument("token " + std::to_string(t) + " slot " + std::to_string(j) + ": expert " +
                                std::to_string(e) + " is lost (no live replica); the router must not select it");
      }
      ++L->num_tokens_per_expert[static_cast<size_t>(e)];
      const int r = dest(static_cast<int64_t>(t) * top_k + j, e);
      uint8_t& in = L->is_token_in_rank[static_cast<size_t>(t) * num_ranks + r];
      if (!in) {
        in = 1;
        ++L->num_tokens_per_rank[static_cast<size_t>(r)];
      }
    }
  }
  L->send_offsets.assign(static_cast<size_t>(num_ranks) + 1, 0);
  for (int r = 0; r < num_ranks; ++r) {
    L->send_offsets[static_cast<size_t>(r) + 1] = L->send_offsets[static_cast<size_t>(r)] + L->num_tokens_per_rank[static_cast<size_t>(r)];
  }
  const size_t total = static_cast<size_t>(L->send_offsets.back());
  L->send_token_idx.resize(total);
  L->send_expert.assign(total * static_cast<size_t>(top_k), -1);
  L->send_weight.assign(total * static_cast<size_t>(top_k), 0.0f);
  std::vector<int> cursor(L->send_offsets.begin(), L->send_offsets.end() - 1);
  for (int t = 0; t < num_tokens; ++t) {
    for (int r = 0; r < num_ranks; ++r) {
      if (!L->is_token_in_rank[static_cast<size_t>(t) * num_ranks + r]) continue;
      const int row = cursor[static_cast<size_t>(r)]++;
      L->send_token_idx[static_cast<size_t>(row)] = t;
      for (int j = 0; j < top_k; ++j) {
        const int e = topk_idx[static_cast<int64_t>(t) * top_k + j];
        if (e == kDroppedExpert || dest(static_cast<int64_t>(t) * top_k + j, e) != r) continue;
        L->send_expert[static_cast<size_t>(row) * top_k + j] = e;
        L->send_weight[static_cast<size_t>(row) * top_k + j] = topk_weights[static_cast<int64_t>(t) * top_k + j];
      }
    }
  }
  return ok_status();
}

}  // namespace moe
