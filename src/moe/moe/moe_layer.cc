#include "moe/moe/moe_layer.h"

#include "moe/moe/router.h"
#include "moe/ops/linear.h"

namespace moe {

void route_tokens(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                  MoeWorkspace* ws) {
  const RouterConfig& rc = config.router;
  const size_t n = static_cast<size_t>(num_tokens);
  if (ws->router_logits.size() < n * static_cast<size_t>(rc.num_experts)) {
    ws->router_logits.resize(n * static_cast<size_t>(rc.num_experts));
  }
  ws->topk_idx.resize(n * static_cast<size_t>(rc.top_k));
  ws->topk_weights.resize(n * static_cast<size_t>(rc.top_k));
  if (num_tokens == 0) return;
  linear(x, num_tokens, layer.router, ws->router_logits.data());  // [num_tokens, num_experts]
  route_softmax_topk(ws->router_logits.data(), num_tokens, rc, ws->topk_idx.data(), ws->topk_weights.data());
}

void moe_forward(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                 MoeWorkspace* ws, float* out) {
  route_tokens(config, layer, x, num_tokens, ws);
  grouped_expert_ffn(config, layer, x, num_tokens, ws->topk_idx.data(), ws->topk_weights.data(),
                     config.router.top_k, &ws->experts, out);
}

}  // namespace moe
