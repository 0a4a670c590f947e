#include "moe/moe/expert_ffn.h"

#include <cstring>

#include "moe/core/check.h"
#include "moe/ops/activation.h"

namespace moe {
namespace {

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

void group_by_expert(const int* topk_idx, const float* topk_weights, int64_t num_rows, int top_k,
                     int num_experts, ExpertGroups* g) {
  const int64_t n = num_rows * top_k;
  g->tokens_per_expert.assign(static_cast<size_t>(num_experts), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (topk_idx[i] >= 0) ++g->tokens_per_expert[static_cast<size_t>(topk_idx[i])];
  }
  g->offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (int e = 0; e < num_experts; ++e) {
    g->offsets[static_cast<size_t>(e) + 1] =
        g->offsets[static_cast<size_t>(e)] + g->tokens_per_expert[static_cast<size_t>(e)];
  }
  const size_t valid = static_cast<size_t>(g->offsets.back());
  g->token_idx.resize(valid);
  g->weight.resize(valid);
  std::vector<int> cursor(g->offsets.begin(), g->offsets.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int e = topk_idx[i];
    if (e < 0) continue;
    const int pos = cursor[static_cast<size_t>(e)]++;
    g->token_idx[static_cast<size_t>(pos)] = static_cast<int>(i / top_k);
    g->weight[static_cast<size_t>(pos)] = topk_weights[i];
  }
}

void grouped_expert_ffn(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_rows,
                        const int* row_expert, const float* row_weight, int top_k, ExpertWorkspace* ws,
                        float* out) {
  const int num_experts = config.router.num_experts;
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.intermediate_size;
  group_by_expert(row_expert, row_weight, num_rows, top_k, num_experts, &ws->groups);
  const ExpertGroups& g = ws->groups;
  const int64_t n_assign = g.offsets.back();

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
  for (int e = 0; e < num_experts; ++e) {
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
  for (int e = 0; e < num_experts; ++e) {
    const int64_t n = g.tokens_per_expert[static_cast<size_t>(e)];
    if (n == 0) continue;
    const int64_t begin = g.offsets[static_cast<size_t>(e)];
    jobs.push_back({gate + begin * inter, n, &layer.experts[static_cast<size_t>(e)].w2, ye + begin * hidden});
  }
  linear_many(jobs.data(), jobs.size());

  // Combine in assignment order = ascending expert id for every row.
  std::memset(out, 0, static_cast<size_t>(num_rows * hidden) * sizeof(float));
  for (int64_t i = 0; i < n_assign; ++i) {
    const float w = g.weight[static_cast<size_t>(i)];
    float* dst = out + static_cast<int64_t>(g.token_idx[static_cast<size_t>(i)]) * hidden;
    const float* src = ye + i * hidden;
    for (int64_t h = 0; h < hidden; ++h) dst[h] += w * src[h];
  }
}

}  // namespace moe
