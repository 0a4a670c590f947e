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
