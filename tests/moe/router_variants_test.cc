// route_topk on exact hand-computed cases for the sigmoid / score-bias / group-limited
// routers (DeepSeek-V3 noaux_tc, DeepSeek-V2 group_limited_greedy), the `ranked`
// output, and the DeepSeek-V3 golden cases: the real router weights and score biases
// of tiny-deepseek-v3-shakespeare against the independent torch reference
// (tools/reference/make_deepseek_router_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "moe/moe/router.h"
#include "moe/ops/linear.h"
#include "test_util.h"

namespace moe {
namespace {

// Logit whose sigmoid is s.
float logit(double s) { return static_cast<float>(std::log(s / (1 - s))); }

RouterConfig sigmoid_router(int experts, int top_k, RouterConfig::TopkMethod method, int n_group = 1,
                            int topk_group = 1, double scale = 1.0) {
  RouterConfig c;
  c.scoring = RouterConfig::Scoring::kSigmoid;
  c.topk_method = method;
  c.num_experts = experts;
  c.top_k = top_k;
  c.norm_topk_prob = true;
  c.n_group = n_group;
  c.topk_group = topk_group;
  c.routed_scaling_factor = scale;
  return c;
}

TEST(RouterVariantsTest, BiasChangesSelectionButNotWeights) {
  // s = [0.5, 0.5, 0.75, 0.25]; bias lifts expert 3 to 0.85 > 0.75.
  const RouterConfig rc = sigmoid_router(4, 2, RouterConfig::TopkMethod::kNoauxTc, 1, 1, 2.0);
  const float logits[4] = {0.0f, 0.0f, logit(0.75), logit(0.25)};
  const float bias[4] = {0.0f, 0.0f, 0.0f, 0.6f};
  int idx[2];
  float w[2];
  route_topk(rc, {logits, bias}, {idx, w, 1, rc.top_k});
  EXPECT_EQ(idx[0], 3);  // selection score 0.85
  EXPECT_EQ(idx[1], 2);  // 0.75
  // Weights from the unbiased scores 0.25 and 0.75, renormalised (sum 1), times 2.0.
  EXPECT_NEAR(w[0], 0.5, 1e-6);
  EXPECT_NEAR(w[1], 1.5, 1e-6);

  const float zero_bias[4] = {0, 0, 0, 0};
  route_topk(rc, {logits, zero_bias}, {idx, w, 1, rc.top_k});
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 0);  // 0.5 tie between experts 0 and 1: the lower id
  EXPECT_NEAR(w[0], 2.0 * 0.75 / 1.25, 1e-6);
  EXPECT_NEAR(w[1], 2.0 * 0.5 / 1.25, 1e-6);
}

TEST(RouterVariantsTest, GroupLimitMasksTheBestExpertsGroup) {
  // 4 groups of 2. s = [0.9, 0.05 | 0.6, 0.6 | 0.8, 0.3 | 0.3, 0.3]; group scores (sum
  // of the top 2) = 0.95, 1.2, 1.1, 0.6 -> groups 1 and 2 are kept, so expert 0 (the
  // best single score) is masked.
  const RouterConfig rc = sigmoid_router(8, 2, RouterConfig::TopkMethod::kNoauxTc, 4, 2);
  const double s[8] = {0.9, 0.05, 0.6, 0.6, 0.8, 0.3, 0.3, 0.3};
  float logits[8];
  for (int e = 0; e < 8; ++e) logits[e] = logit(s[e]);
  const float bias[8] = {};
  int idx[2], ranked[8];
  float w[2];
  route_topk(rc, {logits, bias}, {idx, w, 1, rc.top_k, ranked});
  EXPECT_EQ(idx[0], 4);
  EXPECT_EQ(idx[1], 2);  // 2 and 3 tie at 0.6: the lower id
  EXPECT_NEAR(w[0], 0.8 / 1.4, 1e-6);
  EXPECT_NEAR(w[1], 0.6 / 1.4, 1e-6);
  // Every allowed expert in selection order, then -1 for the masked ones.
  EXPECT_EQ(std::vector<int>(ranked, ranked + 8), (std::vector<int>{4, 2, 3, 5, -1, -1, -1, -1}));
}

TEST(RouterVariantsTest, GroupScoresUseBiasedScores) {
  // Same scores; a bias of +0.7 on expert 7 lifts group 3 to 0.3 + 1.0 = 1.3, the best
  // group (unbiased it would be the worst, 0.6).
  const RouterConfig rc = sigmoid_router(8, 2, RouterConfig::TopkMethod::kNoauxTc, 4, 2);
  const double s[8] = {0.9, 0.05, 0.6, 0.6, 0.8, 0.3, 0.3, 0.3};
  float logits[8];
  for (int e = 0; e < 8; ++e) logits[e] = logit(s[e]);
  const float bias[8] = {0, 0, 0, 0, 0, 0, 0, 0.7f};
  int idx[2];
  float w[2];
  route_topk(rc, {logits, bias}, {idx, w, 1, rc.top_k});
  // Kept groups 3 (1.3) and 1 (1.2): experts 2, 3, 6, 7; selection 0.6, 0.6, 0.3, 1.0.
  EXPECT_EQ(idx[0], 7);
  EXPECT_EQ(idx[1], 2);
  EXPECT_NEAR(w[0], 0.3 / 0.9, 1e-6);  // unbiased 0.3 and 0.6
  EXPECT_NEAR(w[1], 0.6 / 0.9, 1e-6);
}

TEST(RouterVariantsTest, MaskedExpertsLoseToNegativeSelectionScores) {
  // All s = 0.5; biases make every selection score negative. Group 0 = {0,1} scores
  // -0.1 + -0.2 = -0.3 beats group 1 (-3.0). Masking with -inf keeps experts 2 and 3
  // out; filling masked experts with 0.0 (as some implementations do) would pick them.
  const RouterConfig rc = sigmoid_router(4, 2, RouterConfig::TopkMethod::kNoauxTc, 2, 1, 1.5);
  const float logits[4] = {0, 0, 0, 0};
  const float bias[4] = {-0.6f, -0.7f, -2.0f, -2.0f};
  int idx[2];
  float w[2];
  route_topk(rc, {logits, bias}, {idx, w, 1, rc.top_k});
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 1);
  EXPECT_NEAR(w[0], 0.75, 1e-6);  // 0.5 / 1.0 * 1.5
  EXPECT_NEAR(w[1], 0.75, 1e-6);
}

TEST(RouterVariantsTest, WithoutNormalisationWeightsAreScaledScores) {
  RouterConfig rc = sigmoid_router(4, 2, RouterConfig::TopkMethod::kNoauxTc, 1, 1, 2.5);
  rc.norm_topk_prob = false;
  const float logits[4] = {logit(0.2), logit(0.4), logit(0.9), logit(0.1)};
  const float bias[4] = {};
  int idx[2];
  float w[2];
  route_topk(rc, {logits, bias}, {idx, w, 1, rc.top_k});
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 1);
  EXPECT_NEAR(w[0], 2.25, 1e-5);
  EXPECT_NEAR(w[1], 1.0, 1e-5);
}

TEST(RouterVariantsTest, GroupLimitedGreedyUsesTheGroupMax) {
  // DeepSeek-V2: softmax scores, group score = the group's best score. Logits ln(s) give
  // probabilities proportional to s = [0.9, 0.05 | 0.6, 0.6 | 0.8, 0.3 | 0.3, 0.3]:
  // group maxima 0.9, 0.6, 0.8, 0.3 -> groups 0 and 2 -> experts 0 and 4.
  RouterConfig rc;
  rc.scoring = RouterConfig::Scoring::kSoftmax;
  rc.topk_method = RouterConfig::TopkMethod::kGroupLimited;
  rc.num_experts = 8;
  rc.top_k = 2;
  rc.n_group = 4;
  rc.topk_group = 2;
  rc.norm_topk_prob = false;
  const double s[8] = {0.9, 0.05, 0.6, 0.6, 0.8, 0.3, 0.3, 0.3};
  double sum = 0;
  float logits[8];
  for (int e = 0; e < 8; ++e) {
    logits[e] = static_cast<float>(std::log(s[e]));
    sum += s[e];
  }
  int idx[2];
  float w[2];
  route_topk(rc, {logits}, {idx, w, 1, rc.top_k});
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 4);
  EXPECT_NEAR(w[0], 0.9 / sum, 1e-6);  // softmax probabilities, not renormalised
  EXPECT_NEAR(w[1], 0.8 / sum, 1e-6);
}

TEST(RouterVariantsTest, NodeLimitAppliesAfterTheGroupLimit) {
  // Group limit keeps {2,3,4,5} (as above); experts 2,3 on node 0, 4,5 on node 1 (and
  // the rest on node 0). Node scores with ceil(2/1) = 2 best allowed: node 0 = 1.2,
  // node 1 = 1.1 -> node 0 only -> experts 2 and 3.
  const RouterConfig rc = sigmoid_router(8, 2, RouterConfig::TopkMethod::kNoauxTc, 4, 2);
  const double s[8] = {0.9, 0.05, 0.6, 0.6, 0.8, 0.3, 0.3, 0.3};
  float logits[8];
  for (int e = 0; e < 8; ++e) logits[e] = logit(s[e]);
  const float bias[8] = {};
  const int node[8] = {0, 0, 0, 0, 1, 1, 0, 0};
  const NodeLimit limit{node, 2, 1};
  int idx[2];
  float w[2];
  route_topk(rc, {logits, bias, &limit}, {idx, w, 1, rc.top_k});
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 3);
  EXPECT_NEAR(w[0], 0.5, 1e-6);
}

TEST(RouterVariantsTest, RankedListsEveryExpertForSoftmax) {
  RouterConfig rc;
  rc.num_experts = 4;
  rc.top_k = 1;
  const float logits[4] = {1.0f, 3.0f, 2.0f, 1.0f};
  int idx, ranked[4];
  float w;
  route_topk(rc, {logits}, {&idx, &w, 1, rc.top_k, ranked});
  EXPECT_EQ(idx, 1);
  EXPECT_FLOAT_EQ(w, 1.0f);
  EXPECT_EQ(std::vector<int>(ranked, ranked + 4), (std::vector<int>{1, 2, 0, 3}));
}

// The real DeepSeek-V3 router (tiny-deepseek-v3-shakespeare layers 1-3) against the
// torch reference: same expert ids in the same order, weights within 1e-6.
TEST(RouterVariantsTest, DeepseekV3GoldenCases) {
  const std::string dir = testing::golden_dir() + "/deepseek-v3-router";
  const auto cases = nlohmann::json::parse(testing::read_file(dir + "/cases.json"));
  const auto& r = cases["routing"];
  RouterConfig rc = sigmoid_router(r["n_routed_experts"], r["num_experts_per_tok"], RouterConfig::TopkMethod::kNoauxTc,
                                   r["n_group"], r["topk_group"], r["routed_scaling_factor"]);
  const int n = cases["n_tokens"], hidden = cases["hidden_size"], E = rc.num_experts, k = rc.top_k;
  int changed_by_bias = 0, changed_by_groups = 0;
  RouterConfig ungrouped = rc;
  ungrouped.n_group = 1;
  for (const auto& layer : cases["layers"]) {
    SCOPED_TRACE("layer " + std::to_string(layer["layer"].get<int>()));
    const auto w = testing::read_f32(dir + "/" + layer["gate_weight_file"].get<std::string>());
    const auto bias = testing::read_f32(dir + "/" + layer["bias_file"].get<std::string>());
    const auto x = testing::read_f32(dir + "/" + layer["x_file"].get<std::string>());
    ASSERT_EQ(w.size(), static_cast<size_t>(E * hidden));
    ASSERT_EQ(x.size(), static_cast<size_t>(n * hidden));
    const Weight2D gate{w.data(), DType::kF32, E, hidden};
    std::vector<float> logits(static_cast<size_t>(n * E)), weights(static_cast<size_t>(n * k));
    std::vector<int> idx(static_cast<size_t>(n * k)), plain_idx(static_cast<size_t>(n * k));
    linear(x.data(), n, gate, logits.data(), KernelOptions{});
    route_topk(rc, {logits.data(), bias.data()}, {idx.data(), weights.data(), n, rc.top_k});
    const auto want_idx = layer["topk_idx"].get<std::vector<std::vector<int>>>();
    const auto want_w = layer["topk_weights"].get<std::vector<std::vector<double>>>();
    for (int t = 0; t < n; ++t) {
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(idx[static_cast<size_t>(t * k + j)], want_idx[static_cast<size_t>(t)][static_cast<size_t>(j)])
            << "token " << t << " slot " << j;
        EXPECT_NEAR(weights[static_cast<size_t>(t * k + j)], want_w[static_cast<size_t>(t)][static_cast<size_t>(j)], 1e-6);
      }
    }
    // The bias really matters for this model: without it most tokens choose other experts.
    const std::vector<float> zero(static_cast<size_t>(E), 0.0f);
    auto count_changed = [&]() {
      int changed = 0;
      for (int t = 0; t < n; ++t) {
        std::vector<int> a(idx.begin() + t * k, idx.begin() + (t + 1) * k);
        std::vector<int> b(plain_idx.begin() + t * k, plain_idx.begin() + (t + 1) * k);
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        changed += a != b;
      }
      return changed;
    };
    route_topk(rc, {logits.data(), zero.data()}, {plain_idx.data(), weights.data(), n, rc.top_k});
    changed_by_bias += count_changed();
    route_topk(ungrouped, {logits.data(), bias.data()}, {plain_idx.data(), weights.data(), n, ungrouped.top_k});
    changed_by_groups += count_changed();
  }
  // The reference's counts of tokens whose expert set changes, summed over layers 1-3.
  EXPECT_EQ(changed_by_bias, 56 + 91 + 87);
  EXPECT_EQ(changed_by_groups, 61 + 86 + 80);
}

}  // namespace
}  // namespace moe
