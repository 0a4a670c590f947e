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
#include "moe/moe/moe_layer_args.h"
#include "moe/moe/router.h"

namespace moe {

// Reusable buffers of the single-process layer (and of the routing step under EP).
// reserve() sizes them once from the config and the batch limit, so the layer loop does
// not allocate; a larger batch still works (the buffers grow: a fallback, not the plan).
struct MoeWorkspace {
  std::vector<float> router_logits, topk_weights;
  std::vector<int> topk_idx, ranked;
  StepRoutingCounts counts;  // the last step's global routing counts (for load statistics)
  RouterDegradedCounts degraded;  // the last step's router counts on this rank (scratch)
  ExpertWorkspace experts;
  KernelOptions kernel;  // how the router and expert projections run (set by the owner)

  // Capacity for calls of up to max_tokens tokens of `config`'s MoE layers.
  void reserve(const ModelConfig& config, int64_t max_tokens);
  // The routing of the last route_tokens call ([num_tokens, top_k]).
  TopkRoutingView routing(int64_t num_tokens, int top_k) const {
    return {topk_idx.data(), topk_weights.data(), num_tokens, top_k};
  }
};

// How route_tokens limits a step's routing.
struct RouteOptions {
  CapacityOptions capacity;               // overflow policy over the group
  Communicator* comm = nullptr;           // the EP group; nullptr: this process alone
  const NodeLimit* node_limit = nullptr;  // optional node-limited routing
  const uint8_t* expert_alive = nullptr;  // optional [num_experts] degraded mode (router.h); >= top_k alive
};

// Routes the rows of args.x [num_tokens, hidden]: router logits, route_topk (with the
// layer's score bias, the optional node limit and alive mask), then the capacity policy over the
// EP group options.comm. Fills ws->topk_idx / topk_weights [num_tokens, top_k] (see
// ws->routing()) and ws->counts; args.out is not touched. Collective when comm is set
// (every rank calls it, possibly with 0 tokens). Errors: communication errors.
Status route_tokens(const MoeLayerArgs& args, const RouteOptions& options, MoeWorkspace* ws);

// args.out = the MoE block of args.x (both [num_tokens, hidden] f32), under the
// capacity policy `capacity` over this process's batch, in degraded mode when
// `expert_alive` ([num_experts], at least top_k nonzero) is given. Every expert used
// must be loaded. Not thread-safe per workspace.
void moe_forward(const MoeLayerArgs& args, MoeWorkspace* ws, const CapacityOptions& capacity = {},
                 const uint8_t* expert_alive = nullptr);

}  // namespace moe
