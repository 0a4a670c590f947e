// The sparse MoE block, single process: router -> grouped expert FFN -> combine.
//   out[t] = sum_j topk_weights[t, j] * w2(silu(w1 x_t) * w3 x_t) for expert topk_idx[t, j]
// (transformers MixtralSparseMoeBlock). The expert-parallel version is ep_moe_layer.h.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/expert_ffn.h"

namespace moe {

// Reusable buffers, grown on demand, so the layer loop does not allocate per step.
struct MoeWorkspace {
  std::vector<float> router_logits, topk_weights;
  std::vector<int> topk_idx;
  ExpertWorkspace experts;
};

// Router logits then top-k selection for num_tokens rows of x [num_tokens, hidden]:
// fills ws->topk_idx / ws->topk_weights [num_tokens, top_k].
void route_tokens(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                  MoeWorkspace* ws);

// x: [num_tokens, hidden] f32 (post-attention-norm activations); out: [num_tokens, hidden]
// f32, overwritten. Every expert used must be loaded.
void moe_forward(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                 MoeWorkspace* ws, float* out);

}  // namespace moe
