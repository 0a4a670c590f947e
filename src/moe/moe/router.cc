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
