// The sparse MoE block, single process: router -> capacity policy -> grouped expert
// FFN -> combine.
//   out[t] = sum_j topk_weights[t, j] * w2(silu(w1 x_t) * w3 x_t) for expert topk_idx[t, j]
// (transformers MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock without the shared
// expert, which the decoder adds: swiglu_mlp.h). The expert-parallel version is
// ep_moe_layer.h.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/capacity.h"
#include "moe/moe/expert_ffn.h"
#include "moe/moe/router.h"

namespace moe {

// Reusable buffers, grown on demand, so the layer loop does not allocate per step.
struct MoeWorkspace {
  std::vector<float> router_logits, topk_weights;
  std::vector<int> topk_idx, ranked;
  StepRoutingCounts counts;  // the last step's global routing counts (for load statistics)
  ExpertWorkspace experts;
  KernelOptions kernel;  // how the router and expert projections run (set by the owner)
};

// Routes num_tokens rows of x [num_tokens, hidden]: router logits, route_topk (with the
// layer's score bias and the optional node limit), then the capacity policy over the
// EP group `comm` (nullptr: this process alone). Fills ws->topk_idx / topk_weights
// [num_tokens, top_k] and ws->counts. Collective when comm is set (every rank calls
// it, possibly with 0 tokens). Errors: communication errors.
Status route_tokens(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                    const CapacityOptions& capacity, Communicator* comm, const NodeLimit* node_limit,
                    MoeWorkspace* ws);

// x: [num_tokens, hidden] f32 (post-attention-norm activations); out: [num_tokens, hidden]
// f32, overwritten. Every expert used must be loaded.
void moe_forward(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                 MoeWorkspace* ws, float* out, const CapacityOptions& capacity = {});

}  // namespace moe
