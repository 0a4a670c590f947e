// Token sampling from logits: greedy, temperature, min_p, top-k, top-p (nucleus;
// Holtzman et al. 2020), applied in that order as in vLLM (v1) and llama.cpp.
// Deterministic per seed. logit_bias and the penalties come before, in
// logits_processor.h.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace moe {

class Sampler {
 public:
  // temperature 0 = greedy; top_k 0 = off; top_p 1 = off; min_p 0 = off (drops tokens
  // whose probability at this temperature is below min_p times the most likely one's).
  // Values are validated by the engine before a Sampler is built.
  Sampler(float temperature, int top_k, float top_p, uint64_t seed, float min_p = 0.0f);

  // Picks a token from logits [vocab]. Greedy ties go to the lowest id. With
  // temperature > 0 each call draws exactly one value from the random stream (none when
  // greedy), whatever the logits, so skip() can replay it.
  int sample(const float* logits, int vocab);

  // Advances the random stream exactly as `n` sample() calls would (a resumed request's
  // already generated tokens: the next sample() then equals the uninterrupted run's).
  // n >= 0.
  void skip(int64_t n);

 private:
  float temperature_;
  int top_k_;
  float top_p_;
  float min_p_;
  std::mt19937_64 rng_;
  std::vector<int> order_;
  std::vector<float> probs_;
};

int argmax(const float* x, int n);

}  // namespace moe
