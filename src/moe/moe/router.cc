#include "moe/moe/router.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "moe/ops/activation.h"

namespace moe {

void route_softmax_topk(const float* logits, int64_t num_tokens, const RouterConfig& cfg, int* topk_idx,
                        float* topk_weights) {
  const int e = cfg.num_experts, k = cfg.top_k;
  std::vector<float> probs(static_cast<size_t>(e));
  std::vector<int> order(static_cast<size_t>(e));
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::copy(logits + t * e, logits + (t + 1) * e, probs.begin());
    softmax(probs.data(), e);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      return probs[static_cast<size_t>(a)] > probs[static_cast<size_t>(b)] ||
             (probs[static_cast<size_t>(a)] == probs[static_cast<size_t>(b)] && a < b);
    });
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += probs[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int j = 0; j < k; ++j) {
      const int idx = order[static_cast<size_t>(j)];
      topk_idx[t * k + j] = idx;
      const float p = probs[static_cast<size_t>(idx)];
      topk_weights[t * k + j] = cfg.norm_topk_prob ? p / sum : p;
    }
  }
}

}  // namespace moe

namespace moe {

void route_softmax_topk_node_limited(const float* logits, int64_t num_tokens, const RouterConfig& cfg,
                                     const int* expert_node, int num_nodes, int max_nodes, int* topk_idx,
                                     float* topk_weights) {
  const int e = cfg.num_experts, k = cfg.top_k;
  const int per_node = (k + max_nodes - 1) / max_nodes;
  std::vector<int> experts_per_node(static_cast<size_t>(num_nodes), 0);
  for (int i = 0; i < e; ++i) ++experts_per_node[static_cast<size_t>(expert_node[i])];
  std::vector<float> probs(static_cast<size_t>(e));
  std::vector<int> order(static_cast<size_t>(e)), node_order(static_cast<size_t>(num_nodes));
  std::vector<double> node_score(static_cast<size_t>(num_nodes));
  std::vector<int> taken(static_cast<size_t>(num_nodes));
  std::vector<uint8_t> node_ok(static_cast<size_t>(num_nodes));
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::copy(logits + t * e, logits + (t + 1) * e, probs.begin());
    softmax(probs.data(), e);
    std::iota(order.begin(), order.end(), 0);
    auto by_prob = [&](int a, int b) {
      return probs[static_cast<size_t>(a)] > probs[static_cast<size_t>(b)] ||
             (probs[static_cast<size_t>(a)] == probs[static_cast<size_t>(b)] && a < b);
    };
    std::sort(order.begin(), order.end(), by_prob);
    // Node scores: the sum of each node's per_node best probabilities.
    std::fill(node_score.begin(), node_score.end(), 0.0);
    std::fill(taken.begin(), taken.end(), 0);
    for (int idx : order) {
      const int n = expert_node[idx];
      if (taken[static_cast<size_t>(n)] < per_node) {
        node_score[static_cast<size_t>(n)] += probs[static_cast<size_t>(idx)];
        ++taken[static_cast<size_t>(n)];
      }
    }
    std::iota(node_order.begin(), node_order.end(), 0);
    std::sort(node_order.begin(), node_order.end(), [&](int a, int b) {
      return node_score[static_cast<size_t>(a)] > node_score[static_cast<size_t>(b)] ||
             (node_score[static_cast<size_t>(a)] == node_score[static_cast<size_t>(b)] && a < b);
    });
    std::fill(node_ok.begin(), node_ok.end(), 0);
    int kept_experts = 0;
    for (int i = 0; i < num_nodes && (i < max_nodes || kept_experts < k); ++i) {
      node_ok[static_cast<size_t>(node_order[static_cast<size_t>(i)])] = 1;
      kept_experts += experts_per_node[static_cast<size_t>(node_order[static_cast<size_t>(i)])];
    }
    int j = 0;
    float sum = 0;
    for (int idx : order) {
      if (j == k) break;
      if (!node_ok[static_cast<size_t>(expert_node[idx])]) continue;
      topk_idx[t * k + j] = idx;
      topk_weights[t * k + j] = probs[static_cast<size_t>(idx)];
      sum += probs[static_cast<size_t>(idx)];
      ++j;
    }
    if (cfg.norm_topk_prob) {
      for (int i = 0; i < k; ++i) topk_weights[t * k + i] /= sum;
    }
  }
}

}  // namespace moe
