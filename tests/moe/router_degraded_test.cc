// Degraded-mode routing (RouterInputs.expert_alive): dead experts are never selected,
// each token takes its top-k among the live ones with the router's own weight rule,
// `ranked` leaves dead experts out, and the degraded counts. Checked against an
// independent numpy reference (tests/moe/masked_router_ref.py, run by /usr/bin/python3)
// on random logits for Mixtral, Qwen (norm_topk_prob on and off), DeepSeek-V3 noaux_tc
// with groups and DeepSeek-V2 group_limited_greedy, under several masks; plus exact
// hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "moe/moe/router.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;

struct Case {
  std::string name;
  RouterConfig rc;
  std::vector<float> logits;  // [n, E]
  std::vector<float> bias;    // [E] or empty
  std::vector<uint8_t> alive;  // [E]
  int n = 0;
};

RouterConfig router(RouterConfig::Scoring scoring, RouterConfig::TopkMethod method, int E, int k, bool norm,
                    int n_group = 1, int topk_group = 1, double scale = 1.0) {
  RouterConfig c;
  c.scoring = scoring;
  c.topk_method = method;
  c.num_experts = E;
  c.top_k = k;
  c.norm_topk_prob = norm;
  c.n_group = n_group;
  c.topk_group = topk_group;
  c.routed_scaling_factor = scale;
  return c;
}

const char* method_name(RouterConfig::TopkMethod m) {
  switch (m) {
    case RouterConfig::TopkMethod::kGreedy:
      return "greedy";
    case RouterConfig::TopkMethod::kGroupLimited:
      return "group_limited_greedy";
    case RouterConfig::TopkMethod::kNoauxTc:
      return "noaux_tc";
  }
  return "?";
}

std::vector<uint8_t> mask(int E, const std::vector<int>& dead) {
  std::vector<uint8_t> m(static_cast<size_t>(E), 1);
  for (int e : dead) m[static_cast<size_t>(e)] = 0;
  return m;
}

std::vector<Case> make_cases() {
  using S = RouterConfig::Scoring;
  using M = RouterConfig::TopkMethod;
  struct Family {
    std::string name;
    RouterConfig rc;
    std::vector<std::vector<int>> dead_sets;
  };
  const std::vector<Family> families = {
      {"mixtral", router(S::kSoftmax, M::kGreedy, 8, 2, true), {{}, {3}, {0, 1, 2}, {0, 1, 2, 4, 5, 7}}},
      {"qwen_norm", router(S::kSoftmax, M::kGreedy, 16, 4, true), {{5}, {1, 2, 3, 9, 10, 15}}},
      {"qwen_raw", router(S::kSoftmax, M::kGreedy, 16, 4, false), {{5}, {0, 2, 4, 6, 8, 10, 12, 14}}},
      // 4 groups of 4, 2 kept: a whole dead group, groups with one live expert, and
      // so many dead that more groups must be added to reach top_k.
      {"deepseek_v3", router(S::kSigmoid, M::kNoauxTc, 16, 4, true, 4, 2, 2.5),
       {{}, {6}, {4, 5, 6, 7}, {0, 1, 2, 5, 6, 7, 9}, {0, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13}}},
      {"deepseek_v2", router(S::kSoftmax, M::kGroupLimited, 16, 3, false, 4, 2), {{3, 8}, {0, 1, 2, 3, 12, 13, 14}}},
  };
  std::mt19937 rng(1234);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  std::uniform_real_distribution<float> bias(-0.3f, 0.3f);
  std::vector<Case> cases;
  for (const Family& f : families) {
    for (const auto& dead : f.dead_sets) {
      Case c;
      c.name = f.name + " with " + std::to_string(dead.size()) + " dead";
      c.rc = f.rc;
      c.n = 40;
      const int E = f.rc.num_experts;
      c.logits.resize(static_cast<size_t>(c.n * E));
      for (float& v : c.logits) v = logit(rng);
      if (f.rc.has_score_bias()) {
        c.bias.resize(static_cast<size_t>(E));
        for (float& v : c.bias) v = bias(rng);
      }
      c.alive = mask(E, dead);
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

TEST(RouterDegradedTest, MatchesTheNumpyReference) {
  const std::vector<Case> cases = make_cases();
  json in = json::array();
  for (const Case& c : cases) {
    const int E = c.rc.num_experts;
    json rows = json::array();
    for (int t = 0; t < c.n; ++t) {
      json row = json::array();
      for (int e = 0; e < E; ++e) row.push_back(static_cast<double>(c.logits[static_cast<size_t>(t * E + e)]));
      rows.push_back(std::move(row));
    }
    json bias = nullptr;
    if (!c.bias.empty()) {
      bias = json::array();
      for (float b : c.bias) bias.push_back(static_cast<double>(b));
    }
    json alive = json::array();
    for (uint8_t a : c.alive) alive.push_back(static_cast<int>(a));
    in.push_back({{"router",
                   {{"scoring", c.rc.scoring == RouterConfig::Scoring::kSoftmax ? "softmax" : "sigmoid"},
                    {"topk_method", method_name(c.rc.topk_method)},
                    {"top_k", c.rc.top_k},
                    {"norm_topk_prob", c.rc.norm_topk_prob},
                    {"n_group", c.rc.n_group},
                    {"topk_group", c.rc.topk_group},
                    {"routed_scaling_factor", c.rc.routed_scaling_factor}}},
                  {"logits", std::move(rows)},
                  {"bias", std::move(bias)},
                  {"alive", std::move(alive)}});
  }
  testing::ScopedTempDir dir("router_degraded");
  testing::write_file(dir.file("in.json"), in.dump());
  const auto r = testing::run_command("/usr/bin/python3 " +
                                      testing::sh_quote(testing::source_dir() + "/tests/moe/masked_router_ref.py") +
                                      " " + testing::sh_quote(dir.file("in.json")) + " " +
                                      testing::sh_quote(dir.file("out.json")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json want_all = json::parse(testing::read_file(dir.file("out.json")));
  ASSERT_EQ(want_all.size(), cases.size());
  int64_t degraded_seen = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    SCOPED_TRACE(c.name);
    const json& want = want_all[ci];
    const int E = c.rc.num_experts, k = c.rc.top_k;
    std::vector<int> idx(static_cast<size_t>(c.n * k)), ranked(static_cast<size_t>(c.n * E));
    std::vector<float> w(static_cast<size_t>(c.n * k));
    RouterDegradedCounts counts;
    RouterInputs inputs{c.logits.data(), c.bias.empty() ? nullptr : c.bias.data(), nullptr, c.alive.data()};
    route_topk(c.rc, inputs, {idx.data(), w.data(), c.n, k, ranked.data()}, &counts);
    for (int t = 0; t < c.n; ++t) {
      for (int j = 0; j < k; ++j) {
        const size_t i = static_cast<size_t>(t * k + j);
        EXPECT_EQ(idx[i], want["topk_idx"][static_cast<size_t>(t)][static_cast<size_t>(j)].get<int>())
            << "token " << t << " slot " << j;
        EXPECT_NEAR(w[i], want["topk_weights"][static_cast<size_t>(t)][static_cast<size_t>(j)].get<double>(), 1e-6)
            << "token " << t << " slot " << j;
        EXPECT_TRUE(c.alive[static_cast<size_t>(idx[i])]) << "dead expert " << idx[i] << " selected";
      }
      for (int e = 0; e < E; ++e) {
        EXPECT_EQ(ranked[static_cast<size_t>(t * E + e)],
                  want["ranked"][static_cast<size_t>(t)][static_cast<size_t>(e)].get<int>())
            << "token " << t << " ranked " << e;
      }
    }
    EXPECT_EQ(counts.degraded_tokens, want["degraded_tokens"].get<int64_t>());
    EXPECT_EQ(counts.wanted_dead, want["wanted_dead"].get<std::vector<int64_t>>());
    degraded_seen += counts.degraded_tokens;

    // Without degraded counts, and with ranked off, the same routing.
    std::vector<int> idx2(idx.size());
    std::vector<float> w2(w.size());
    route_topk(c.rc, inputs, {idx2.data(), w2.data(), c.n, k});
    EXPECT_EQ(idx2, idx);
    EXPECT_EQ(w2, w);
  }
  // The masks really bite: many tokens are rerouted across the cases.
  EXPECT_GT(degraded_seen, 100);
}

TEST(RouterDegradedTest, AllAliveMaskEqualsNoMask) {
  for (const Case& c : make_cases()) {
    const int E = c.rc.num_experts, k = c.rc.top_k;
    const std::vector<uint8_t> all(static_cast<size_t>(E), 1);
    std::vector<int> a(static_cast<size_t>(c.n * k)), b(a.size()), ra(static_cast<size_t>(c.n * E)), rb(ra.size());
    std::vector<float> wa(a.size()), wb(a.size());
    const float* bias = c.bias.empty() ? nullptr : c.bias.data();
    RouterDegradedCounts counts;
    counts.degraded_tokens = 99;  // overwritten
    route_topk(c.rc, {c.logits.data(), bias, nullptr, all.data()}, {a.data(), wa.data(), c.n, k, ra.data()}, &counts);
    route_topk(c.rc, {c.logits.data(), bias}, {b.data(), wb.data(), c.n, k, rb.data()});
    EXPECT_EQ(a, b) << c.name;
    EXPECT_EQ(wa, wb) << c.name;
    EXPECT_EQ(ra, rb) << c.name;
    EXPECT_EQ(counts.degraded_tokens, 0);
    EXPECT_EQ(counts.wanted_dead, std::vector<int64_t>(static_cast<size_t>(E), 0));
    // No mask at all: the counts are zeros too.
    route_topk(c.rc, {c.logits.data(), bias}, {b.data(), wb.data(), c.n, k}, &counts);
    EXPECT_EQ(counts.degraded_tokens, 0);
  }
}

TEST(RouterDegradedTest, HandComputedMixtralAndQwen) {
  // Softmax of logits ln(p) = p for p = [0.4, 0.3, 0.2, 0.1]; expert 0 dead.
  const float logits[4] = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  const uint8_t alive[4] = {0, 1, 1, 1};
  int idx[2], ranked[4];
  float w[2];
  RouterDegradedCounts counts;
  RouterConfig rc = router(RouterConfig::Scoring::kSoftmax, RouterConfig::TopkMethod::kGreedy, 4, 2, true);
  route_topk(rc, {logits, nullptr, nullptr, alive}, {idx, w, 1, 2, ranked}, &counts);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 2);
  EXPECT_NEAR(w[0], 0.6, 1e-6);  // 0.3 / (0.3 + 0.2)
  EXPECT_NEAR(w[1], 0.4, 1e-6);
  EXPECT_EQ(std::vector<int>(ranked, ranked + 4), (std::vector<int>{1, 2, 3, -1}));
  EXPECT_EQ(counts.degraded_tokens, 1);
  EXPECT_EQ(counts.wanted_dead, (std::vector<int64_t>{1, 0, 0, 0}));
  // Qwen without normalisation: the softmax over all four experts, dead one included.
  rc.norm_topk_prob = false;
  route_topk(rc, {logits, nullptr, nullptr, alive}, {idx, w, 1, 2}, &counts);
  EXPECT_NEAR(w[0], 0.3, 1e-6);
  EXPECT_NEAR(w[1], 0.2, 1e-6);
  // Expert 3 dead: not in anyone's top-2, so not degraded, same routing as all alive.
  const uint8_t alive3[4] = {1, 1, 1, 0};
  route_topk(rc, {logits, nullptr, nullptr, alive3}, {idx, w, 1, 2}, &counts);
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 1);
  EXPECT_EQ(counts.degraded_tokens, 0);
  EXPECT_EQ(counts.wanted_dead, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(count_alive_experts(alive, 4), 3);
  EXPECT_EQ(count_alive_experts(nullptr, 4), 4);
}

TEST(RouterDegradedTest, DeadExpertLowersItsGroupScore) {
  // DeepSeek-V3, 4 groups of 2, keep 2. s = [0.9, 0.05 | 0.6, 0.6 | 0.8, 0.3 | 0.3, 0.3]:
  // all alive, group scores 0.95, 1.2, 1.1, 0.6 -> groups 1, 2 -> experts 4, 2. With
  // expert 4 dead, group 2 scores 0.3 (its one live expert) and group 0 (0.95) is kept
  // instead: experts 0 and 2.
  const RouterConfig rc = router(RouterConfig::Scoring::kSigmoid, RouterConfig::TopkMethod::kNoauxTc, 8, 2, true, 4, 2);
  const double s[8] = {0.9, 0.05, 0.6, 0.6, 0.8, 0.3, 0.3, 0.3};
  float logits[8];
  for (int e = 0; e < 8; ++e) logits[e] = static_cast<float>(std::log(s[e] / (1 - s[e])));
  const float bias[8] = {};
  const uint8_t alive[8] = {1, 1, 1, 1, 0, 1, 1, 1};
  int idx[2], ranked[8];
  float w[2];
  RouterDegradedCounts counts;
  route_topk(rc, {logits, bias, nullptr, alive}, {idx, w, 1, 2, ranked}, &counts);
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 2);
  EXPECT_NEAR(w[0], 0.9 / 1.5, 1e-6);
  EXPECT_NEAR(w[1], 0.6 / 1.5, 1e-6);
  EXPECT_EQ(std::vector<int>(ranked, ranked + 8), (std::vector<int>{0, 2, 3, 1, -1, -1, -1, -1}));
  EXPECT_EQ(counts.degraded_tokens, 1);
  EXPECT_EQ(counts.wanted_dead, (std::vector<int64_t>{0, 0, 0, 0, 1, 0, 0, 0}));
}

TEST(RouterDegradedDeathTest, FewerLiveExpertsThanTopKIsABug) {
  const RouterConfig rc = router(RouterConfig::Scoring::kSoftmax, RouterConfig::TopkMethod::kGreedy, 4, 2, true);
  const float logits[4] = {0, 0, 0, 0};
  const uint8_t alive[4] = {0, 0, 1, 0};
  int idx[2];
  float w[2];
  EXPECT_DEATH(route_topk(rc, {logits, nullptr, nullptr, alive}, {idx, w, 1, 2}), "");
}

}  // namespace
}  // namespace moe
