// The dispatch layout of one MoE step under expert parallelism, computed once from the
// router output and reused by dispatch, combine and load statistics (the "plan once,
// run" handle of DeepEP's get_dispatch_layout).
//
// A token whose top-k experts share a rank is sent to that rank once; the row carries
// the token's expert ids for that rank (others set to -1) and their weights, so the
// receiving rank runs every local expert the token needs and returns one partial sum.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/moe/topk_routing.h"
#include "moe/placement/expert_placement.h"
#include "moe/status.h"

namespace moe {

struct DispatchLayout {
  int num_tokens = 0;
  int top_k = 0;
  int num_ranks = 0;
  std::vector<int> num_tokens_per_rank;    // [num_ranks] distinct tokens sent to each rank
  std::vector<int> num_tokens_per_expert;  // [num_experts] assignments per expert
  std::vector<uint8_t> is_token_in_rank;   // [num_tokens, num_ranks] 1 if sent there
  std::vector<int> send_offsets;           // [num_ranks + 1] prefix sums of num_tokens_per_rank
  std::vector<int> send_token_idx;         // [total_send] token of each send row, grouped by rank,
                                           //   ascending token index within a rank
  std::vector<int> send_expert;            // [total_send, top_k] expert ids for that rank, -1 elsewhere
  std::vector<float> send_weight;          // [total_send, top_k] routing weights (0 where -1)
  int total_send() const { return send_offsets.empty() ? 0 : send_offsets.back(); }
};

// An assignment dropped by the capacity policy (moe/capacity.h): skipped everywhere.
inline constexpr int kDroppedExpert = -1;

// routing: topk_idx, topk_weights [num_tokens, num_topk]; kDroppedExpert entries are
// skipped (a token with all its assignments dropped is sent nowhere). InvalidArgument
// (naming the token, slot and expert) for an expert id outside [0, num_experts),
// listed twice in one row, or lost (no replica in `placement`); `layout` is then left unspecified. Deterministic: depends
// only on the inputs.
// assign_rank: optional [num_tokens, num_topk] rank that computes each assignment (the
// replica chosen by choose_replicas, which must hold the expert); nullptr = each
// expert's first replica.
Status compute_dispatch_layout(const TopkRoutingView& routing, const ExpertPlacement& placement, DispatchLayout* layout,
                               const int* assign_rank = nullptr);

}  // namespace moe
