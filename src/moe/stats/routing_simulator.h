// Synthetic routing from measured per-expert totals: when a routing statistic only gives
// each expert's token count (SGLang's logical_count, the OLMoE paper's counts), steps of
// num_tokens tokens are simulated by the Gumbel-top-k trick. Each token draws its ranked
// expert list by sorting keys Exp(1) / w_e ascending (equivalently log w_e + Gumbel noise
// descending); its first num_topk entries are its routing. `moe bench capacity` runs the
// capacity limit (moe/capacity.h) on these steps.
//
// Deterministic: a step is a pure function of (weights, num_tokens, seed), bitwise the
// same on every machine that has the same libm log(). Thread-safe: const methods only
// (each thread passes its own SimulatedStep).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "moe/status.h"

namespace moe {

// How the sampling weights w_e follow from the shares q_e = counts[e] / sum(counts):
//   kShare:   w_e = q_e (the plain recipe; top-k marginals come out flatter than k q_e).
//   kMatched: w_e = -log(1 - k q_e), so a token holds e in its top-k with probability
//             ~ k q_e, the measured marginal (a sample without replacement cannot give a
//             heavy expert k q_e with plain shares).
enum class RoutingSampler { kMatched, kShare };

// "matched" or "share"; InvalidArgument naming the value otherwise.
StatusOr<RoutingSampler> parse_routing_sampler(const std::string& name);

// One simulated step.
struct SimulatedStep {
  std::vector<int> topk_idx;                // [num_tokens, num_topk] expert ids, best first
  std::vector<int> ranked;                  // [num_tokens, num_experts] every expert, best first
  std::vector<int64_t> tokens_per_expert;   // [num_experts] assignments in topk_idx
  std::vector<std::pair<double, int>> keys;  // [num_experts] workspace of sample_step
};

class RoutingSimulator {
 public:
  // counts: [num_experts] finite, >= 0, not all zero; 1 <= num_topk <= num_experts.
  // InvalidArgument naming the bad argument otherwise.
  static StatusOr<RoutingSimulator> create(std::vector<double> counts, int num_topk, RoutingSampler sampler);

  int num_experts() const { return static_cast<int>(counts_.size()); }
  int num_topk() const { return num_topk_; }
  // q_e = counts[e] / sum(counts), [num_experts].
  const std::vector<double>& shares() const { return shares_; }
  // max / mean of the counts (1 = balanced).
  double imbalance() const { return imbalance_; }
  // The infinite-batch bound on the dropped fraction at capacity factor F:
  // sum_e max(0, q_e - F / num_experts).
  double drop_bound(double capacity_factor) const;

  // Samples one step of `num_tokens` tokens from the splitmix64 stream seeded with `seed`.
  // `out` is resized (its buffers are reused across calls); ties (weight 0, key +inf) go
  // to the lower expert id.
  void sample_step(int num_tokens, uint64_t seed, SimulatedStep* out) const;

 private:
  RoutingSimulator() = default;
  std::vector<double> counts_, shares_, inv_weights_;  // [num_experts]
  int num_topk_ = 0;
  double imbalance_ = 0;
};

// The seed of one simulated step: FNV-1a of `key` (e.g. "<source>/<layer>/<batch>/<step>")
// mixed with the user's seed, so every (source, layer, batch, step) has its own stream.
uint64_t routing_step_seed(const std::string& key, int64_t seed);

// The drop policy's dropped assignments for per-expert totals n_e and a capacity of
// `capacity` per expert: sum_e max(0, n_e - capacity) (what apply_capacity computes).
int64_t dropped_assignments(const std::vector<int64_t>& tokens_per_expert, int64_t capacity);

// The smallest factor F in [0, hi] with frac(F) < 0.01 for a non-increasing frac, to 1e-3
// by bisection; `hi` itself when frac(hi) >= 0.01.
template <typename Fn>
double factor_for_one_percent(Fn frac, double hi) {
  if (frac(hi) >= 0.01) return hi;
  double lo = 0;
  while (hi - lo > 1e-3) {
    const double mid = 0.5 * (lo + hi);
    (frac(mid) < 0.01 ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace moe
