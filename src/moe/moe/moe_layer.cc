#include "moe/moe/moe_layer.h"

#include "moe/core/check.h"
#include "moe/ops/linear.h"

namespace moe {

void MoeWorkspace::reserve(const ModelConfig& config, int64_t max_tokens) {
  const size_t n = static_cast<size_t>(max_tokens);
  const size_t E = static_cast<size_t>(config.router.num_experts), k = static_cast<size_t>(config.router.top_k);
  router_logits.reserve(n * E);
  topk_idx.reserve(n * k);
  topk_weights.reserve(n * k);
  ranked.reserve(n * E);  // used only under the reroute policy (address space until then)
  counts.tokens_per_expert.reserve(E);
  counts.degraded_per_expert.reserve(E);
  degraded.wanted_dead.reserve(E);
  experts.reserve(config, max_tokens);
}

Status route_tokens(const MoeLayerArgs& args, const RouteOptions& options, MoeWorkspace* ws) {
  const ModelConfig& config = args.config;
  const LayerWeights& layer = args.layer;
  const int64_t num_tokens = args.num_tokens();
  const RouterConfig& rc = config.router;
  const size_t n = static_cast<size_t>(num_tokens), E = static_cast<size_t>(rc.num_experts);
  if (ws->router_logits.size() < n * E) ws->router_logits.resize(n * E);
  ws->topk_idx.resize(n * static_cast<size_t>(rc.top_k));
  ws->topk_weights.resize(n * static_cast<size_t>(rc.top_k));
  const bool reroute = options.capacity.policy == OverflowPolicy::kReroute;
  if (reroute && ws->ranked.size() < n * E) ws->ranked.resize(n * E);
  const TopkRouting routing{ws->topk_idx.data(), ws->topk_weights.data(), num_tokens, rc.top_k,
                            reroute ? ws->ranked.data() : nullptr};
  if (num_tokens > 0) {
    linear(args.x_data(), num_tokens, layer.router, ws->router_logits.data(), ws->kernel);  // [num_tokens, num_experts]
    const RouterInputs in{ws->router_logits.data(), layer.score_bias.empty() ? nullptr : layer.score_bias.data(),
                          options.node_limit, options.expert_alive};
    route_topk(rc, in, routing, &ws->degraded);
  } else {
    ws->degraded.degraded_tokens = 0;
    ws->degraded.wanted_dead.assign(E, 0);
  }
  // This rank's degraded counts in; apply_capacity sums them over the group.
  ws->counts.degraded_tokens = ws->degraded.degraded_tokens;
  ws->counts.degraded_per_expert.assign(ws->degraded.wanted_dead.begin(), ws->degraded.wanted_dead.end());
  if (!options.capacity.adaptive.enabled) {
    return apply_capacity(options.capacity, options.comm, rc.num_experts, routing, &ws->counts);
  }
  // Adaptive k renormalises kept weights exactly when the router normalises its top-k.
  CapacityOptions capacity = options.capacity;
  capacity.adaptive.renormalize = rc.norm_topk_prob;
  return apply_capacity(capacity, options.comm, rc.num_experts, routing, &ws->counts);
}

void moe_forward(const MoeLayerArgs& args, MoeWorkspace* ws, const CapacityOptions& capacity,
                 const uint8_t* expert_alive) {
  check_moe_layer_args(args);
  const Status st = route_tokens(args, RouteOptions{capacity, nullptr, nullptr, expert_alive}, ws);
  MOE_CHECK(st.ok());  // without a communicator nothing can fail
  ws->experts.kernel = ws->kernel;
  grouped_expert_ffn(args, ws->routing(args.num_tokens(), args.config.router.top_k), &ws->experts);
}

}  // namespace moe
