#include "moe/moe/moe_layer.h"

#include <algorithm>
#include <cstring>

#include "moe/core/check.h"
#include "moe/moe/router.h"
#include "moe/ops/activation.h"
#include "moe/ops/linear.h"

namespace moe {
namespace {

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

void group_by_expert(const int* topk_idx, const float* topk_weights, int64_t num_tokens, int top_k,
                     int num_experts, ExpertGroups* g) {
  const int64_t n = num_tokens * top_k;
  g->tokens_per_expert.assign(static_cast<size_t>(num_experts), 0);
  for (int64_t i = 0; i < n; ++i) ++g->tokens_per_expert[static_cast<size_t>(topk_idx[i])];
  g->offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (int e = 0; e < num_experts; ++e) {
    g->offsets[static_cast<size_t>(e) + 1] = g->offsets[static_cast<size_t>(e)] + g->tokens_per_expert[static_cast<size_t>(e)];
  }
  g->token_idx.resize(static_cast<size_t>(n));
  g->weight.resize(static_cast<size_t>(n));
  std::vector<int> cursor(g->offsets.begin(), g->offsets.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int e = topk_idx[i];
    const int pos = cursor[static_cast<size_t>(e)]++;
    g->token_idx[static_cast<size_t>(pos)] = static_cast<int>(i / top_k);
    g->weight[static_cast<size_t>(pos)] = topk_weights[i];
  }
}

void moe_forward(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                 MoeWorkspace* ws, float* out) {
  const RouterConfig& rc = config.router;
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.intermediate_size;
  const int k = rc.top_k;

  float* logits = grow(ws->router_logits, static_cast<size_t>(num_tokens * rc.num_experts));
  linear(x, num_tokens, layer.router, logits);  // [num_tokens, num_experts]
  int* topk_idx = grow(ws->topk_idx, static_cast<size_t>(num_tokens * k));
  float* topk_w = grow(ws->topk_weights, static_cast<size_t>(num_tokens * k));
  route_softmax_topk(logits, num_tokens, rc, topk_idx, topk_w);
  group_by_expert(topk_idx, topk_w, num_tokens, k, rc.num_experts, &ws->groups);

  // Grouped GEMM: every assignment's input row, grouped by expert, in one buffer; the
  // experts' projections then run as one batch of jobs per stage (w1+w3, then w2).
  const ExpertGroups& g = ws->groups;
  const int64_t n_assign = num_tokens * k;
  float* xe = grow(ws->gathered, static_cast<size_t>(n_assign * hidden));  // [n_assign, hidden]
  for (int64_t i = 0; i < n_assign; ++i) {
    std::memcpy(xe + i * hidden, x + static_cast<int64_t>(g.token_idx[static_cast<size_t>(i)]) * hidden,
                static_cast<size_t>(hidden) * sizeof(float));
  }
  float* gate = grow(ws->gate, static_cast<size_t>(n_assign * inter));        // [n_assign, inter]
  float* up = grow(ws->up, static_cast<size_t>(n_assign * inter));            // [n_assign, inter]
  float* ye = grow(ws->expert_out, static_cast<size_t>(n_assign * hidden));  // [n_assign, hidden]
  std::vector<LinearJob>& jobs = ws->jobs;
  jobs.clear();
  for (int e = 0; e < rc.num_experts; ++e) {
    const int64_t n = g.tokens_per_expert[static_cast<size_t>(e)];
    if (n == 0) continue;
    const ExpertWeights& ew = layer.experts[static_cast<size_t>(e)];
    MOE_CHECK(ew.loaded);
    const int64_t begin = g.offsets[static_cast<size_t>(e)];
    jobs.push_back({xe + begin * hidden, n, &ew.w1, gate + begin * inter});
    jobs.push_back({xe + begin * hidden, n, &ew.w3, up + begin * inter});
  }
  linear_many(jobs.data(), jobs.size());
  silu_mul(gate, up, n_assign * inter, gate);
  jobs.clear();
  for (int e = 0; e < rc.num_experts; ++e) {
    const int64_t n = g.tokens_per_expert[static_cast<size_t>(e)];
    if (n == 0) continue;
    const int64_t begin = g.offsets[static_cast<size_t>(e)];
    jobs.push_back({gate + begin * inter, n, &layer.experts[static_cast<size_t>(e)].w2, ye + begin * hidden});
  }
  linear_many(jobs.data(), jobs.size());

  // Combine: each token's expert outputs, weighted, summed in expert order.
  std::memset(out, 0, static_cast<size_t>(num_tokens * hidden) * sizeof(float));
  for (int64_t i = 0; i < n_assign; ++i) {
    const float w = g.weight[static_cast<size_t>(i)];
    float* dst = out + static_cast<int64_t>(g.token_idx[static_cast<size_t>(i)]) * hidden;
    const float* src = ye + i * hidden;
    for (int64_t h = 0; h < hidden; ++h) dst[h] += w * src[h];
  }
}

}  // namespace moe
