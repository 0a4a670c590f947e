// Adaptive top-k (the seed's router.adaptive_k / min_k / max_k): under load,
// tokens give up their lower-ranked experts with small weights, never going below
// min_k. Part of the capacity step (capacity.h), so it runs on the step's global
// routing over the EP group and decides the same on every rank.
//
// The rule, per step, on routing [num_tokens, top_k] (slots in router selection order,
// best first):
//   1. Cap (always, every step): slots j >= max_k are removed (expert kDroppedExpert,
//      weight 0). With max_k == top_k nothing changes.
//   2. Load target: L = expert_capacity(global_tokens, max_k, num_experts,
//      target_factor) assignments per expert (capacity.h's formula with max_k). An
//      expert is overloaded when n_e, its assignments over the EP group after step 1,
//      exceeds L.
//   3. Candidates of an overloaded expert e: its assignments (t, j) with slot
//      j >= min_k (so slots 0..min_k-1 are never touched: a token keeps at least min_k
//      experts). Each has a share s = w[t, j] / sum_i w[t, i] (the token's weights after
//      step 1). Expert e sheds min(n_e - L, its candidate count) candidates: smallest
//      share first; equal shares: the later one in global token order (rank-major,
//      then token, then slot) first. Experts do not interact (a token may lose slots on
//      several overloaded experts). Shares are compared as the f32 values each rank
//      computed and exchanged, so every rank reaches the same decision bitwise.
//   4. Renormalisation (steps 1 and 3) when `renormalize` (routers that normalise their
//      top-k: Mixtral, Qwen with norm_topk_prob, DeepSeek with norm_topk_prob): the kept
//      weights are scaled by S / S_kept (S = the sum of the token's weights before the
//      step, S_kept = that of the kept slots), which is exactly the router's weight rule
//      applied to the kept experts (softmax top-k renormalised, or sigmoid scores over
//      their sum times routed_scaling_factor). Without it the kept weights stay as they
//      are (Qwen without norm_topk_prob: raw probabilities).
// The capacity policy then runs on the reduced routing (its capacity computed with
// max_k instead of top_k).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/moe/topk_routing.h"
#include "moe/status.h"

namespace moe {

struct AdaptiveKOptions {
  bool enabled = false;
  int min_k = 1;               // 1 <= min_k <= max_k
  int max_k = 0;               // <= the router's top_k; 0 = top_k
  double target_factor = 1.0;  // > 0: load target L = ceil(tokens * max_k * factor / experts)
  bool renormalize = true;     // rescale kept weights (route_tokens sets it from RouterConfig)
};

// OK when disabled; else InvalidArgument naming min_k / max_k / the target factor when
// min_k < 1, min_k > max_k, max_k > top_k (the model's experts per token), or the
// factor is not a positive finite number.
Status validate_adaptive_k(const AdaptiveKOptions& options, int top_k);

// max_k resolved against the routing's width (0 -> top_k).
inline int adaptive_max_k(const AdaptiveKOptions& options, int top_k) {
  return options.max_k > 0 ? options.max_k : top_k;
}

// Step 1 on this rank's rows (local; no communication).
void cap_to_max_k(const AdaptiveKOptions& options, const TopkRouting& routing);

// The step's per-rank per-expert assignment counts, as apply_capacity gathers them:
// rows[r * width + e] = rank r's assignments of expert e (e < num_experts).
struct RankExpertCounts {
  std::vector<int64_t>* rows = nullptr;  // [ranks, width], updated for the shed assignments
  size_t width = 0;
  int num_experts = 0;
  int64_t global_tokens = 0;
};

// What steps 2-4 did (identical on every rank).
struct AdaptiveKOutcome {
  int64_t target = -1;     // L
  int64_t tokens = 0;      // tokens that shed at least one expert
  int64_t assignments = 0; // assignments shed
};

// Steps 2-4: collective over comm (nullptr = one process), every rank with its rows
// after cap_to_max_k. Rewrites this rank's shed slots (kDroppedExpert, weight 0) and
// renormalises. Errors: communication errors.
Status shed_under_load(const AdaptiveKOptions& options, Communicator* comm, const TopkRouting& routing,
                       const RankExpertCounts& counts, AdaptiveKOutcome* out);

// Every rank's block of int32 values, concatenated in rank order (an allgatherv);
// (*counts)[r] = the length of rank r's block. comm nullptr: this block alone.
Status allgather_ints(Communicator* comm, const std::vector<int>& mine, std::vector<int>* all,
                      std::vector<int64_t>* counts);

}  // namespace moe
