// Routers: router logits -> (topk_idx, topk_weights) per token.
#pragma once

#include <cstdint>

#include "moe/model/config.h"

namespace moe {

// Mixtral's router (transformers MixtralSparseMoeBlock; Jiang et al. 2024):
// softmax over all experts in f32 -> top-k -> renormalise the k weights to sum 1
// (when cfg.norm_topk_prob).
//   logits:       [num_tokens, num_experts] f32
//   topk_idx:     [num_tokens, top_k] expert ids, highest weight first; ties go to the
//                 lower expert id
//   topk_weights: [num_tokens, top_k] f32
void route_softmax_topk(const float* logits, int64_t num_tokens, const RouterConfig& cfg, int* topk_idx,
                        float* topk_weights);

}  // namespace moe

namespace moe {

// Node-limited routing (DeepSeek-V3 technical report, sec. 2.1.2: "each token will be
// sent to at most M nodes, which are selected according to the sum of the highest
// K_r/M affinity scores of the experts distributed on each node"), applied to the
// softmax router: per token, node score = sum of its ceil(top_k / M) highest expert
// probabilities; the M best nodes are kept (ties: lower node id; more nodes are added
// if the kept ones hold fewer than top_k experts); top-k is taken among their experts
// and renormalised as route_softmax_topk does.
//   expert_node: [num_experts] node of each expert; max_nodes >= 1.
void route_softmax_topk_node_limited(const float* logits, int64_t num_tokens, const RouterConfig& cfg,
                                     const int* expert_node, int num_nodes, int max_nodes, int* topk_idx,
                                     float* topk_weights);

}  // namespace moe
