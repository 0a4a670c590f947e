#include "moe/placement/replica_choice.h"

namespace moe {

void choose_replicas(const ExpertPlacement& placement, const int* topk_idx, int64_t num_tokens, int top_k, int me,
                     const std::vector<int>& rank_node, std::vector<int64_t>* load, int* assign_rank) {
  load->assign(static_cast<size_t>(placement.num_ranks()), 0);
  const int my_node = rank_node[static_cast<size_t>(me)];
  for (int64_t i = 0; i < num_tokens * top_k; ++i) {
    const int e = topk_idx[i];
    if (e < 0) {
      assign_rank[i] = -1;
      continue;
    }
    const std::vector<int>& reps = placement.replicas(e);
    if (reps.empty()) {  // a lost expert: nowhere to send it (the dispatch layout rejects it)
      assign_rank[i] = -1;
      continue;
    }
    int best = reps.front();
    if (reps.size() > 1) {
      // Tier: 0 = this rank, 1 = this node, 2 = remote; then load, then rank.
      auto tier = [&](int r) { return r == me ? 0 : (rank_node[static_cast<size_t>(r)] == my_node ? 1 : 2); };
      for (int r : reps) {
        const int tr = tier(r), tb = tier(best);
        if (tr < tb || (tr == tb && (*load)[static_cast<size_t>(r)] < (*load)[static_cast<size_t>(best)])) best = r;
      }
    }
    assign_rank[i] = best;
    ++(*load)[static_cast<size_t>(best)];
  }
}

int choose_replica_on_node(const ExpertPlacement& placement, int expert, int node, int me,
                           const std::vector<int>& rank_node, std::vector<int64_t>* load) {
  int best = -1;
  for (int r : placement.replicas(expert)) {
    if (rank_node[static_cast<size_t>(r)] != node) continue;
    if (r == me) {
      best = me;
      break;
    }
    if (best < 0 || (*load)[static_cast<size_t>(r)] < (*load)[static_cast<size_t>(best)]) best = r;
  }
  if (best >= 0) ++(*load)[static_cast<size_t>(best)];
  return best;
}

}  // namespace moe
