#include "moe/moe/moe_layer.h"

#include "moe/core/check.h"
#include "moe/ops/linear.h"

namespace moe {

Status route_tokens(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                    const CapacityOptions& capacity, Communicator* comm, const NodeLimit* node_limit,
                    MoeWorkspace* ws) {
  const RouterConfig& rc = config.router;
  const size_t n = static_cast<size_t>(num_tokens), E = static_cast<size_t>(rc.num_experts);
  if (ws->router_logits.size() < n * E) ws->router_logits.resize(n * E);
  ws->topk_idx.resize(n * static_cast<size_t>(rc.top_k));
  ws->topk_weights.resize(n * static_cast<size_t>(rc.top_k));
  const bool reroute = capacity.policy == OverflowPolicy::kReroute;
  if (reroute && ws->ranked.size() < n * E) ws->ranked.resize(n * E);
  if (num_tokens > 0) {
    linear(x, num_tokens, layer.router, ws->router_logits.data(), ws->kernel);  // [num_tokens, num_experts]
    route_topk(ws->router_logits.data(), num_tokens, rc, layer.score_bias.empty() ? nullptr : layer.score_bias.data(),
               node_limit, ws->topk_idx.data(), ws->topk_weights.data(), reroute ? ws->ranked.data() : nullptr);
  }
  return apply_capacity(capacity, comm, num_tokens, rc.top_k, rc.num_experts, ws->topk_idx.data(),
                        ws->topk_weights.data(), reroute ? ws->ranked.data() : nullptr, &ws->counts);
}

void moe_forward(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                 MoeWorkspace* ws, float* out, const CapacityOptions& capacity) {
  const Status st = route_tokens(config, layer, x, num_tokens, capacity, nullptr, nullptr, ws);
  MOE_CHECK(st.ok());  // without a communicator nothing can fail
  ws->experts.kernel = ws->kernel;
  grouped_expert_ffn(config, layer, x, num_tokens, ws->topk_idx.data(), ws->topk_weights.data(),
                     config.router.top_k, &ws->experts, out);
}

}  // namespace moe
