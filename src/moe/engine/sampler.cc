#include "moe/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moe {

int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

Sampler::Sampler(float temperature, int top_k, float top_p, uint64_t seed, float min_p)
    : temperature_(temperature), top_k_(top_k), top_p_(top_p), min_p_(min_p), rng_(seed) {}

int Sampler::sample(const float* logits, int vocab) {
  if (temperature_ <= 0.0f) return argmax(logits, vocab);
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  int k = (top_k_ > 0 && top_k_ < vocab) ? top_k_ : vocab;
  auto by_logit = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (k < vocab) {
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  // Softmax over the k candidates at this temperature, relative to the most likely
  // token (probs_[0] = 1). min_p (before top-k, as vLLM) keeps a prefix of the sorted
  // order: the tokens with p / p_max >= min_p.
  probs_.resize(static_cast<size_t>(k));
  const float mx = logits[order_[0]];
  double sum = 0;
  int kept_min_p = k;
  for (int i = 0; i < k; ++i) {
    const float p = std::exp((logits[order_[static_cast<size_t>(i)]] - mx) / temperature_);
    if (min_p_ > 0.0f && p < min_p_) {
      kept_min_p = i;
      break;
    }
    probs_[static_cast<size_t>(i)] = p;
    sum += p;
  }
  if (kept_min_p < k) k = std::max(kept_min_p, 1);
  // Nucleus: the smallest prefix whose mass reaches top_p (at least one token).
  int keep = k;
  if (top_p_ < 1.0f) {
    double cum = 0;
    for (int i = 0; i < k; ++i) {
      cum += probs_[static_cast<size_t>(i)] / sum;
      if (cum >= top_p_) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += probs_[static_cast<size_t>(i)];
  // One raw 64-bit draw per call (skip() relies on it): its top 53 bits as a double
  // in [0, 1), scaled to the kept mass.
  const double r = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * kept;
  double acc = 0;
  for (int i = 0; i < keep; ++i) {
    acc += probs_[static_cast<size_t>(i)];
    if (r < acc) return order_[static_cast<size_t>(i)];
  }
  return order_[static_cast<size_t>(keep - 1)];
}

void Sampler::skip(int64_t n) {
  if (temperature_ > 0.0f && n > 0) rng_.discard(static_cast<unsigned long long>(n));
}

}  // namespace moe
