#include "moe/moe/router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "moe/core/check.h"
#include "moe/ops/activation.h"

namespace moe {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// Keeps the `keep` best buckets of experts (bucket_of[e] in [0, num_buckets)), by the
// sum of each bucket's `per_bucket` best unmasked values (max when per_bucket == 1);
// buckets are added beyond `keep` while the kept ones hold fewer than `need` unmasked
// experts. Masks (sets to -inf) every expert outside the kept buckets. Linear in the
// number of experts (a bucket's best values are kept in a small sorted array).
struct BucketLimiter {
  std::vector<float> best;  // [num_buckets, per_bucket] descending
  std::vector<double> score;
  std::vector<int> taken, order, unmasked;
  std::vector<uint8_t> kept;

  void apply(float* sel, int num_experts, const int* bucket_of, int num_buckets, int keep, int per_bucket, int need) {
    const size_t B = static_cast<size_t>(num_buckets), P = static_cast<size_t>(per_bucket);
    best.assign(B * P, kMasked);
    taken.assign(B, 0);
    unmasked.assign(B, 0);
    for (int e = 0; e < num_experts; ++e) {
      const float v = sel[e];
      if (v == kMasked) continue;
      const size_t b = static_cast<size_t>(bucket_of[e]);
      ++unmasked[b];
      float* top = best.data() + b * P;
      if (!(v > top[P - 1])) continue;  // ties keep the earlier (equal) value: same sum
      size_t i = P - 1;
      for (; i > 0 && v > top[i - 1]; --i) top[i] = top[i - 1];
      top[i] = v;
    }
    score.assign(B, 0.0);
    for (size_t b = 0; b < B; ++b) {
      for (size_t i = 0; i < P; ++i) {
        if (best[b * P + i] == kMasked) break;
        score[b] += best[b * P + i];
        ++taken[b];
      }
    }
    order.resize(B);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      const size_t ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
      // Buckets without unmasked experts sort last.
      if ((taken[ua] > 0) != (taken[ub] > 0)) return taken[ua] > 0;
      return score[ua] > score[ub] || (score[ua] == score[ub] && a < b);
    });
    kept.assign(B, 0);
    int have = 0;
    for (int i = 0; i < num_buckets && (i < keep || have < need); ++i) {
      kept[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
      have += unmasked[static_cast<size_t>(order[static_cast<size_t>(i)])];
    }
    for (int e = 0; e < num_experts; ++e) {
      if (!kept[static_cast<size_t>(bucket_of[e])]) sel[e] = kMasked;
    }
  }
};

}  // namespace

int count_alive_experts(const uint8_t* expert_alive, int num_experts) {
  if (expert_alive == nullptr) return num_experts;
  int n = 0;
  for (int e = 0; e < num_experts; ++e) n += expert_alive[e] != 0;
  return n;
}

void route_topk(const RouterConfig& cfg, const RouterInputs& in, const TopkRouting& out,
                RouterDegradedCounts* degraded) {
  const float* logits = in.logits;
  const float* score_bias = in.score_bias;
  const NodeLimit* node_limit = in.node_limit;
  const int64_t num_tokens = out.num_tokens;
  int* topk_idx = out.topk_idx;
  float* topk_weights = out.topk_weights;
  int* ranked = out.ranked;
  const int E = cfg.num_experts, k = cfg.top_k;
  MOE_CHECK(k >= 1 && k <= E);
  MOE_CHECK(out.num_topk == k);
  const bool biased = cfg.has_score_bias();
  MOE_CHECK(!biased || score_bias != nullptr);
  const bool grouped = cfg.topk_method != RouterConfig::TopkMethod::kGreedy && cfg.n_group > 1;
  const bool node_limited = node_limit != nullptr && node_limit->max_nodes > 0 &&
                            node_limit->max_nodes < node_limit->num_nodes;
  const uint8_t* alive = in.expert_alive;
  MOE_CHECK(count_alive_experts(alive, E) >= k);
  const bool count_degraded = alive != nullptr && degraded != nullptr;
  if (degraded != nullptr) {
    degraded->degraded_tokens = 0;
    degraded->wanted_dead.assign(static_cast<size_t>(E), 0);
  }
  std::vector<float> s(static_cast<size_t>(E)), sel(static_cast<size_t>(E)), all_alive_sel;
  std::vector<int> all_alive_order;
  if (count_degraded) all_alive_order.resize(static_cast<size_t>(E));
  std::vector<int> order(static_cast<size_t>(E)), group_of;
  if (grouped) {
    group_of.resize(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) group_of[static_cast<size_t>(e)] = e / (E / cfg.n_group);
  }
  BucketLimiter limiter;
  const int group_top = cfg.topk_method == RouterConfig::TopkMethod::kNoauxTc ? 2 : 1;
  const int node_top = node_limited ? (k + node_limit->max_nodes - 1) / node_limit->max_nodes : 0;

  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* lg = logits + t * E;
    if (cfg.scoring == RouterConfig::Scoring::kSoftmax) {
      std::copy(lg, lg + E, s.begin());
      softmax(s.data(), E);
    } else {
      for (int e = 0; e < E; ++e) s[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-lg[e]));
    }
    for (int e = 0; e < E; ++e) {
      sel[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + (biased ? score_bias[e] : 0.0f);
    }
    // The group and node limits, then (below) the best k of what they leave.
    auto limit = [&](std::vector<float>& v) {
      if (grouped) limiter.apply(v.data(), E, group_of.data(), cfg.n_group, cfg.topk_group, group_top, k);
      if (node_limited) {
        limiter.apply(v.data(), E, node_limit->expert_node, node_limit->num_nodes, node_limit->max_nodes, node_top, k);
      }
    };
    auto better_in = [](const std::vector<float>& v) {
      return [&v](int a, int b) {
        return v[static_cast<size_t>(a)] > v[static_cast<size_t>(b)] ||
               (v[static_cast<size_t>(a)] == v[static_cast<size_t>(b)] && a < b);
      };
    };
    if (count_degraded) {
      // The token's top-k with every expert alive: degraded when it holds a dead one.
      all_alive_sel = sel;
      limit(all_alive_sel);
      std::iota(all_alive_order.begin(), all_alive_order.end(), 0);
      std::partial_sort(all_alive_order.begin(), all_alive_order.begin() + k, all_alive_order.end(),
                        better_in(all_alive_sel));
      bool hit = false;
      for (int j = 0; j < k; ++j) {
        const int e = all_alive_order[static_cast<size_t>(j)];
        if (!alive[e]) {
          ++degraded->wanted_dead[static_cast<size_t>(e)];
          hit = true;
        }
      }
      degraded->degraded_tokens += hit;
    }
    if (alive != nullptr) {
      for (int e = 0; e < E; ++e) {
        if (!alive[e]) sel[static_cast<size_t>(e)] = kMasked;
      }
    }
    limit(sel);
    std::iota(order.begin(), order.end(), 0);
    const auto better = better_in(sel);
    if (ranked != nullptr) {
      std::sort(order.begin(), order.end(), better);
      int* dst = ranked + t * E;
      for (int i = 0; i < E; ++i) {
        const int e = order[static_cast<size_t>(i)];
        dst[i] = sel[static_cast<size_t>(e)] == kMasked ? -1 : e;
      }
    } else {
      std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
    }
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += s[static_cast<size_t>(order[static_cast<size_t>(j)])];
    if (cfg.scoring == RouterConfig::Scoring::kSigmoid) sum += 1e-20f;
    const float scale = static_cast<float>(cfg.routed_scaling_factor);
    for (int j = 0; j < k; ++j) {
      const int e = order[static_cast<size_t>(j)];
      topk_idx[t * k + j] = e;
      const float p = s[static_cast<size_t>(e)];
      topk_weights[t * k + j] = (cfg.norm_topk_prob ? p / sum : p) * scale;
    }
  }
}

void route_softmax_topk(const RouterConfig& cfg, const float* logits, const TopkRouting& out) {
  route_topk(cfg, RouterInputs{logits, nullptr, nullptr}, out);
}

void route_softmax_topk_node_limited(const RouterConfig& cfg, const float* logits, const NodeLimit& limit,
                                     const TopkRouting& out) {
  route_topk(cfg, RouterInputs{logits, nullptr, &limit}, out);
}

}  // namespace moe
