// Routers: router logits -> (topk_idx, topk_weights) per token, for every router the
// supported families use (selected by RouterConfig, parsed from config.json):
//
//   Mixtral (transformers MixtralSparseMoeBlock): softmax over all experts in f32 ->
//     top-k -> renormalise the k weights to sum 1.
//   Qwen2-MoE / Qwen3-MoE (Qwen2MoeSparseMoeBlock): the same, renormalising only when
//     norm_topk_prob.
//   DeepSeek-V3 `noaux_tc` (DeepSeek-V3 technical report sec. 2.1.2; transformers
//     DeepseekV3TopkRouter): s = sigmoid(logits); selection scores b = s +
//     e_score_correction_bias (used only to choose experts); with n_group > 1 the
//     experts form n_group groups of consecutive ids, a group's score is the sum of its
//     two highest b, the topk_group best groups are kept and every other expert is
//     masked to -inf; top-k by b; weights = the UNBIASED s of the chosen experts,
//     divided by (their sum + 1e-20) when norm_topk_prob; times routed_scaling_factor.
//   DeepSeek-V2 `group_limited_greedy`: as above with softmax scores, no bias and the
//     group score = the group's highest score.
//
// Ties (equal scores) go to the lower expert id, and for groups/nodes to the lower
// group/node id, so routing is deterministic. All arithmetic in f32.
//
// Degraded mode (docs/reliability.md): with RouterInputs.expert_alive, a dead expert (a
// lost one: no live replica) is never selected. Its selection score is -inf before
// anything else, group and node scores included, so each token takes its top-k among
// the live experts (its "next-best live experts") with the router's usual weight rule
// over the chosen ones: softmax over ALL experts then renormalised over the k chosen
// (Mixtral, Qwen with norm_topk_prob), the raw softmax probabilities (Qwen without),
// or the unbiased sigmoid scores (DeepSeek). A group's score sums its best live
// selection scores (fewer than two when fewer are live; a group with none ranks last),
// and groups are added beyond topk_group while the kept ones hold fewer than top_k
// live experts.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/model/config.h"
#include "moe/moe/topk_routing.h"

namespace moe {

// Node-limited routing (DeepSeek-V3 report, sec. 2.1.2: "each token will be sent to at
// most M nodes, which are selected according to the sum of the highest K_r/M affinity
// scores of the experts distributed on each node"), applied after the router's own
// group limit: per token, node score = sum of its ceil(top_k / M) highest selection
// scores among allowed experts; the M best nodes are kept (ties: lower node id; more
// nodes are added while the kept ones hold fewer than top_k allowed experts).
struct NodeLimit {
  const int* expert_node = nullptr;  // [num_experts] node of each expert
  int num_nodes = 0;
  int max_nodes = 0;  // M >= 1; a limit >= num_nodes changes nothing
};

// What a router reads besides its config.
struct RouterInputs {
  const float* logits = nullptr;          // [num_tokens, num_experts] f32 router logits
  const float* score_bias = nullptr;      // [num_experts] f32 e_score_correction_bias; required when
                                          //   cfg.has_score_bias(), ignored otherwise
  const NodeLimit* node_limit = nullptr;  // optional (nullptr = none)
  const uint8_t* expert_alive = nullptr;  // optional [num_experts] 0 = dead (never selected), else alive;
                                          //   nullptr = all alive. At least top_k must be alive.
};

// What degraded mode cost one route_topk call: a token is degraded when its top-k with
// every expert alive (same router, same limits) holds a dead expert.
struct RouterDegradedCounts {
  int64_t degraded_tokens = 0;
  std::vector<int64_t> wanted_dead;  // [num_experts] degraded tokens whose all-alive top-k held expert e
                                     //   (0 for live experts)
};

// Routes out.num_tokens tokens: fills out.topk_idx (best selection score first) and
// out.topk_weights, and out.ranked when it is set (width cfg.num_experts).
// Preconditions (MOE_CHECK): out.num_topk == cfg.top_k, 1 <= top_k <= num_experts, at
// least top_k experts alive (callers check count_alive_experts first and return an
// error). `degraded` (optional) is overwritten with this call's counts (zeros without
// in.expert_alive); computing them routes each token twice. Thread-safe for distinct
// outputs (no shared state).
void route_topk(const RouterConfig& cfg, const RouterInputs& in, const TopkRouting& out,
                RouterDegradedCounts* degraded = nullptr);

// Number of nonzero entries of expert_alive[num_experts]; num_experts when it is null.
int count_alive_experts(const uint8_t* expert_alive, int num_experts);

// route_topk without bias or node limit (Mixtral/Qwen routers).
//   logits: [out.num_tokens, cfg.num_experts] f32
void route_softmax_topk(const RouterConfig& cfg, const float* logits, const TopkRouting& out);

// route_topk with a node limit and no bias.
void route_softmax_topk_node_limited(const RouterConfig& cfg, const float* logits, const NodeLimit& limit,
                                     const TopkRouting& out);

}  // namespace moe
