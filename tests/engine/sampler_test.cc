// Sampler: greedy, temperature, top-k, top-p; determinism per seed; empirical
// frequencies against the softmax probabilities.
#include "moe/engine/sampler.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

namespace moe {
namespace {

std::vector<float> log_probs(std::initializer_list<double> p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

// Frequencies of each token over `draws` samples.
std::vector<double> frequencies(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) {
    const int tok = s.sample(logits.data(), static_cast<int>(logits.size()));
    EXPECT_GE(tok, 0);
    EXPECT_LT(tok, static_cast<int>(logits.size()));
    if (tok >= 0 && tok < static_cast<int>(logits.size())) f[static_cast<size_t>(tok)] += 1;
  }
  for (auto& v : f) v /= draws;
  return f;
}

TEST(ArgmaxTest, LowestIdWinsTies) {
  const float a[5] = {1, 5, 2, 5, -1};
  EXPECT_EQ(argmax(a, 5), 1);
  const float b[4] = {-3, -2, -2.5f, -7};
  EXPECT_EQ(argmax(b, 4), 1);
  const float c[3] = {0, 0, 0};
  EXPECT_EQ(argmax(c, 3), 0);
  const float d[3] = {1, 2, 3};
  EXPECT_EQ(argmax(d, 3), 2);
}

TEST(SamplerTest, GreedyIsArgmax) {
  Sampler s(0.0f, 0, 1.0f, 42);
  const float a[6] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f, 0.0f};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(a, 6), 1);
  const float b[4] = {-5, -4, -6, -4.5f};
  EXPECT_EQ(s.sample(b, 4), 1);
  const float c[3] = {0, 0, 1e-3f};
  EXPECT_EQ(s.sample(c, 3), 2);
}

TEST(SamplerTest, TopK1AlwaysReturnsArgmax) {
  Sampler s(1.5f, 1, 1.0f, 7);
  const std::vector<float> logits = {1.0f, 1.2f, 1.1f, 0.9f, 1.19f};
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(s.sample(logits.data(), 5), 1);
  // Ties under top-k = 1 go to the lower id too.
  const std::vector<float> tie = {0.0f, 2.0f, 2.0f};
  for (int i = 0; i < 200; ++i) ASSERT_EQ(s.sample(tie.data(), 3), 1);
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDiffers) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  auto run = [&](uint64_t seed) {
    Sampler s(1.0f, 0, 1.0f, seed);
    std::vector<int> seq;
    for (int i = 0; i < 200; ++i) seq.push_back(s.sample(logits.data(), static_cast<int>(logits.size())));
    return seq;
  };
  const std::vector<int> a = run(1234), b = run(1234), c = run(1235);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The sequence actually varies (it is not stuck on one token).
  int distinct = 0;
  std::vector<bool> seen(logits.size(), false);
  for (int t : a) {
    if (!seen[static_cast<size_t>(t)]) ++distinct;
    seen[static_cast<size_t>(t)] = true;
  }
  EXPECT_GT(distinct, 10);
}

TEST(SamplerTest, TinyTopPIsArgmax) {
  Sampler s(1.0f, 0, 1e-6f, 3);
  const std::vector<float> logits = log_probs({0.2, 0.3, 0.5 - 1e-3, 1e-3});
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(s.sample(logits.data(), 4), 2);
}

TEST(SamplerTest, EmpiricalFrequenciesMatchSoftmax) {
  Sampler s(1.0f, 0, 1.0f, 2024);
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.2});
  const std::vector<double> f = frequencies(s, logits, 20000);
  EXPECT_NEAR(f[0], 0.5, 0.02);
  EXPECT_NEAR(f[1], 0.3, 0.02);
  EXPECT_NEAR(f[2], 0.2, 0.02);
}

TEST(SamplerTest, EmpiricalFrequenciesShuffledOrder) {
  // Same distribution with the tokens permuted and a constant added to the logits.
  Sampler s(1.0f, 0, 1.0f, 77);
  std::vector<float> logits = log_probs({0.2, 0.5, 0.3});
  for (auto& v : logits) v += 100.0f;
  const std::vector<double> f = frequencies(s, logits, 20000);
  EXPECT_NEAR(f[0], 0.2, 0.02);
  EXPECT_NEAR(f[1], 0.5, 0.02);
  EXPECT_NEAR(f[2], 0.3, 0.02);
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.2});
  // T = 2: p ~ sqrt([0.5, 0.3, 0.2]) = [0.4155, 0.3218, 0.2627].
  {
    Sampler s(2.0f, 0, 1.0f, 11);
    const std::vector<double> f = frequencies(s, logits, 20000);
    EXPECT_NEAR(f[0], 0.4155, 0.02);
    EXPECT_NEAR(f[1], 0.3218, 0.02);
    EXPECT_NEAR(f[2], 0.2627, 0.02);
  }
  // T = 0.5: p ~ [0.25, 0.09, 0.04] / 0.38 = [0.6579, 0.2368, 0.1053].
  {
    Sampler s(0.5f, 0, 1.0f, 12);
    const std::vector<double> f = frequencies(s, logits, 20000);
    EXPECT_NEAR(f[0], 0.6579, 0.02);
    EXPECT_NEAR(f[1], 0.2368, 0.02);
    EXPECT_NEAR(f[2], 0.1053, 0.02);
  }
}

TEST(SamplerTest, TopK2NeverReturnsThird) {
  Sampler s(1.0f, 2, 1.0f, 5);
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.2});
  const std::vector<double> f = frequencies(s, logits, 20000);
  EXPECT_EQ(f[2], 0.0);
  // Renormalised over the two kept: [0.625, 0.375].
  EXPECT_NEAR(f[0], 0.625, 0.02);
  EXPECT_NEAR(f[1], 0.375, 0.02);
}

TEST(SamplerTest, TopP07NeverReturnsThird) {
  // Cumulative [0.5, 0.8, 1.0]: the smallest prefix reaching 0.7 is {0, 1}.
  Sampler s(1.0f, 0, 0.7f, 6);
  const std::vector<float> logits = log_probs({0.2, 0.5, 0.3});  // token 0 is the least likely
  const std::vector<double> f = frequencies(s, logits, 20000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[1], 0.625, 0.02);
  EXPECT_NEAR(f[2], 0.375, 0.02);
}

TEST(SamplerTest, TopKIsAppliedBeforeTopP) {
  // After top-k = 2 the kept probabilities renormalise to [0.625, 0.375]; top-p 0.6 then
  // keeps only the first. (Applied to the raw [0.5, 0.3, 0.2], 0.6 would keep two.)
  Sampler s(1.0f, 2, 0.6f, 8);
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.2});
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(s.sample(logits.data(), 3), 0);
}

// skip(n) advances the random stream exactly as n sample() calls (whatever their
// logits, top-k and top-p): the samples after it equal an uninterrupted sampler's.
TEST(SamplerTest, SkipEqualsSampling) {
  std::vector<float> a(40), b(40);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
    b[i] = static_cast<float>(std::cos(1.3 * static_cast<double>(i)));
  }
  struct Params {
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Params p : {Params{0.9f, 0, 1.0f}, Params{1.5f, 5, 1.0f}, Params{0.7f, 0, 0.6f}, Params{0.0f, 0, 1.0f}}) {
    for (int n : {0, 1, 7, 33}) {
      Sampler full(p.temperature, p.top_k, p.top_p, 99);
      for (int i = 0; i < n; ++i) (void)full.sample((i % 2 ? a : b).data(), static_cast<int>(a.size()));
      Sampler resumed(p.temperature, p.top_k, p.top_p, 99);
      resumed.skip(n);
      std::vector<int> x, y;
      for (int i = 0; i < 60; ++i) {
        const float* l = (i % 3 ? a : b).data();
        x.push_back(full.sample(l, static_cast<int>(a.size())));
        y.push_back(resumed.sample(l, static_cast<int>(a.size())));
      }
      EXPECT_EQ(x, y) << "T " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p << " skip " << n;
    }
  }
  // Skipping is not a no-op: skip(1) shifts the stream by one draw.
  Sampler s0(1.0f, 0, 1.0f, 5), s1(1.0f, 0, 1.0f, 5);
  s1.skip(1);
  std::vector<int> x, y;
  for (int i = 0; i < 60; ++i) {
    x.push_back(s0.sample(a.data(), static_cast<int>(a.size())));
    y.push_back(s1.sample(a.data(), static_cast<int>(a.size())));
  }
  EXPECT_NE(x, y);
  EXPECT_EQ(std::vector<int>(x.begin() + 1, x.end()), std::vector<int>(y.begin(), y.end() - 1));
}

}  // namespace
}  // namespace moe
