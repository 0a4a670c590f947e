#include "moe/stats/routing_simulator.h"

#include <algorithm>
#include <cmath>

namespace moe {
namespace {

struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so log() is finite.
  double open01() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
};

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

StatusOr<RoutingSampler> parse_routing_sampler(const std::string& name) {
  if (name == "matched") return RoutingSampler::kMatched;
  if (name == "share") return RoutingSampler::kShare;
  return invalid_argument("routing sampler must be matched or share (got '" + name + "')");
}

StatusOr<RoutingSimulator> RoutingSimulator::create(std::vector<double> counts, int num_topk,
                                                    RoutingSampler sampler) {
  const int E = static_cast<int>(counts.size());
  if (E < 1) return invalid_argument("RoutingSimulator: counts is empty (need one count per expert)");
  if (num_topk < 1 || num_topk > E) {
    return invalid_argument("RoutingSimulator: num_topk must be in [1, " + std::to_string(E) + "] (got " +
                            std::to_string(num_topk) + ")");
  }
  double total = 0, mx = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const double v = counts[e];
    if (!std::isfinite(v) || v < 0) {
      return invalid_argument("RoutingSimulator: counts[" + std::to_string(e) + "] must be finite and >= 0");
    }
    total += v;
    mx = std::max(mx, v);
  }
  if (total <= 0) return invalid_argument("RoutingSimulator: every count is zero");
  RoutingSimulator r;
  r.num_topk_ = num_topk;
  r.imbalance_ = mx / (total / E);
  r.shares_.resize(counts.size());
  r.inv_weights_.resize(counts.size());
  for (size_t e = 0; e < counts.size(); ++e) {
    r.shares_[e] = counts[e] / total;
    const double kq = std::min(num_topk * r.shares_[e], 1.0 - 1e-9);
    const double w = sampler == RoutingSampler::kShare ? r.shares_[e] : -std::log1p(-kq);
    r.inv_weights_[e] = w > 0 ? 1.0 / w : INFINITY;
  }
  r.counts_ = std::move(counts);
  return r;
}

double RoutingSimulator::drop_bound(double capacity_factor) const {
  const double E = static_cast<double>(shares_.size());
  double d = 0;
  for (double q : shares_) d += std::max(0.0, q - capacity_factor / E);
  return d;
}

void RoutingSimulator::sample_step(int num_tokens, uint64_t seed, SimulatedStep* out) const {
  const size_t n = static_cast<size_t>(std::max(num_tokens, 0));
  const size_t E = shares_.size(), k = static_cast<size_t>(num_topk_);
  out->topk_idx.resize(n * k);
  out->ranked.resize(n * E);
  out->tokens_per_expert.assign(E, 0);
  out->keys.resize(E);
  SplitMix64 rng{seed};
  for (size_t t = 0; t < n; ++t) {
    for (size_t e = 0; e < E; ++e) out->keys[e] = {-std::log(rng.open01()) * inv_weights_[e], static_cast<int>(e)};
    std::sort(out->keys.begin(), out->keys.end());  // ties (weight 0: +inf) to the lower id
    int* row = out->ranked.data() + t * E;
    for (size_t e = 0; e < E; ++e) row[e] = out->keys[e].second;
    for (size_t j = 0; j < k; ++j) {
      out->topk_idx[t * k + j] = row[j];
      ++out->tokens_per_expert[static_cast<size_t>(row[j])];
    }
  }
}

uint64_t routing_step_seed(const std::string& key, int64_t seed) {
  return fnv1a(key, static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + 1469598103934665603ull);
}

int64_t dropped_assignments(const std::vector<int64_t>& tokens_per_expert, int64_t capacity) {
  int64_t d = 0;
  for (int64_t v : tokens_per_expert) d += std::max<int64_t>(0, v - capacity);
  return d;
}

}  // namespace moe
