// route_softmax_topk and group_by_expert on hand-computed cases.
#include "moe/moe/router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "moe/moe/moe_layer.h"

namespace moe {
namespace {

RouterConfig router(int experts, int top_k, bool norm = true) {
  RouterConfig c;
  c.num_experts = experts;
  c.top_k = top_k;
  c.norm_topk_prob = norm;
  return c;
}

TEST(RouterTest, Top2HandCase) {
  // softmax([0, ln2, ln4, 0]) = [1, 2, 4, 1] / 8; top-2 = experts 2 (0.5), 1 (0.25);
  // renormalised: [2/3, 1/3].
  const float logits[4] = {0, static_cast<float>(std::log(2.0)), static_cast<float>(std::log(4.0)), 0};
  int idx[2];
  float w[2];
  route_softmax_topk(router(4, 2), logits, {idx, w, 1, 2});
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 1);
  EXPECT_NEAR(w[0], 2.0 / 3.0, 1e-6);
  EXPECT_NEAR(w[1], 1.0 / 3.0, 1e-6);
}

TEST(RouterTest, WithoutRenormalisationReturnsSoftmaxProbs) {
  const float logits[4] = {0, static_cast<float>(std::log(2.0)), static_cast<float>(std::log(4.0)), 0};
  int idx[2];
  float w[2];
  route_softmax_topk(router(4, 2, /*norm=*/false), logits, {idx, w, 1, 2});
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 1);
  EXPECT_NEAR(w[0], 0.5, 1e-6);
  EXPECT_NEAR(w[1], 0.25, 1e-6);
}

TEST(RouterTest, TiesGoToLowerExpertId) {
  int idx[3];
  float w[3];
  // Experts 1 and 3 tie for first place.
  const float a[4] = {0, 2, 1, 2};
  route_softmax_topk(router(4, 2), a, {idx, w, 1, 2});
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 3);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  // A tie at the cut-off: experts 1, 2, 3 tie for second place; 1 wins.
  const float b[4] = {5, 1, 1, 1};
  route_softmax_topk(router(4, 2), b, {idx, w, 1, 2});
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 1);
  // All equal: the lowest ids in order.
  const float c[5] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  route_softmax_topk(router(5, 3), c, {idx, w, 1, 3});
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 1);
  EXPECT_EQ(idx[2], 2);
  for (float v : w) EXPECT_NEAR(v, 1.0 / 3.0, 1e-6);
}

TEST(RouterTest, TopKEqualsNumExperts) {
  // softmax([ln1, ln3, ln2, ln4]) = [1, 3, 2, 4] / 10, order 3, 1, 2, 0.
  const float logits[4] = {0, static_cast<float>(std::log(3.0)), static_cast<float>(std::log(2.0)),
                           static_cast<float>(std::log(4.0))};
  int idx[4];
  float w[4];
  route_softmax_topk(router(4, 4), logits, {idx, w, 1, 4});
  const int want_idx[4] = {3, 1, 2, 0};
  const double want_w[4] = {0.4, 0.3, 0.2, 0.1};
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(idx[j], want_idx[j]) << j;
    EXPECT_NEAR(w[j], want_w[j], 1e-6) << j;
  }
}

TEST(RouterTest, Top1HasWeightOne) {
  const float logits[3] = {-1, 3, 2};
  int idx;
  float w;
  route_softmax_topk(router(3, 1), logits, {&idx, &w, 1, 1});
  EXPECT_EQ(idx, 1);
  EXPECT_FLOAT_EQ(w, 1.0f);
  route_softmax_topk(router(3, 1, false), logits, {&idx, &w, 1, 1});
  EXPECT_EQ(idx, 1);
  // e^3 / (e^-1 + e^3 + e^2) = 0.7213991
  EXPECT_NEAR(w, 0.72139918, 1e-6);
}

TEST(RouterTest, TokensAreRoutedIndependently) {
  // Three tokens, each with a different winner pair; large logits must not overflow.
  const float logits[3 * 4] = {
      0, static_cast<float>(std::log(2.0)), static_cast<float>(std::log(4.0)), 0,  // -> 2, 1
      1000, 1000 + static_cast<float>(std::log(3.0)), 0, 0,                         // -> 1, 0 (3/4, 1/4)
      -5, -5, -5, 0,                                                                // -> 3, 0
  };
  int idx[6];
  float w[6];
  route_softmax_topk(router(4, 2), logits, {idx, w, 3, 2});
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 1);
  EXPECT_NEAR(w[0], 2.0 / 3.0, 1e-6);
  EXPECT_EQ(idx[2], 1);
  EXPECT_EQ(idx[3], 0);
  EXPECT_NEAR(w[2], 0.75, 1e-4);  // 1000 + ln3 is not exact in f32
  EXPECT_NEAR(w[3], 0.25, 1e-4);
  EXPECT_EQ(idx[4], 3);
  EXPECT_EQ(idx[5], 0);
  EXPECT_NEAR(w[4], 1.0 / (1.0 + std::exp(-5.0)), 1e-6);
  for (int t = 0; t < 3; ++t) EXPECT_NEAR(w[2 * t] + w[2 * t + 1], 1.0, 1e-6) << t;
}

// ---- group_by_expert ---------------------------------------------------------------

TEST(GroupByExpertTest, HandRouting) {
  // 4 tokens x top-2 over 4 experts.
  const int idx[8] = {2, 0,   // token 0
                      1, 2,   // token 1
                      2, 3,   // token 2
                      0, 2};  // token 3
  const float w[8] = {0.6f, 0.4f, 0.7f, 0.3f, 0.55f, 0.45f, 0.8f, 0.2f};
  ExpertGroups g;
  group_by_expert({idx, w, 4, 2}, 4, &g);
  EXPECT_EQ(g.tokens_per_expert, (std::vector<int>{2, 1, 4, 1}));
  EXPECT_EQ(g.offsets, (std::vector<int>{0, 2, 3, 7, 8}));
  // expert 0: tokens 0, 3; expert 1: token 1; expert 2: tokens 0, 1, 2, 3; expert 3: token 2.
  EXPECT_EQ(g.token_idx, (std::vector<int>{0, 3, 1, 0, 1, 2, 3, 2}));
  EXPECT_EQ(g.weight, (std::vector<float>{0.4f, 0.8f, 0.7f, 0.6f, 0.3f, 0.55f, 0.2f, 0.45f}));
}

TEST(GroupByExpertTest, UnusedExpertsAndReuse) {
  ExpertGroups g;
  // First a bigger routing, then reuse the same struct for a smaller one: nothing stale.
  const int idx1[8] = {0, 1, 1, 0, 2, 3, 3, 2};
  const float w1[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  group_by_expert({idx1, w1, 4, 2}, 4, &g);
  EXPECT_EQ(g.tokens_per_expert, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(g.token_idx, (std::vector<int>{0, 1, 0, 1, 2, 3, 2, 3}));
  EXPECT_EQ(g.weight, (std::vector<float>{1, 4, 2, 3, 5, 8, 6, 7}));

  // 3 tokens x top-1 over 6 experts; experts 0, 2, 3, 5 unused.
  const int idx2[3] = {4, 1, 4};
  const float w2[3] = {0.9f, 1.0f, 0.5f};
  group_by_expert({idx2, w2, 3, 1}, 6, &g);
  EXPECT_EQ(g.tokens_per_expert, (std::vector<int>{0, 1, 0, 0, 2, 0}));
  EXPECT_EQ(g.offsets, (std::vector<int>{0, 0, 1, 1, 1, 3, 3}));
  EXPECT_EQ(g.token_idx, (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(g.weight, (std::vector<float>{1.0f, 0.9f, 0.5f}));
}

TEST(GroupByExpertTest, NegativeIdsAreSkipped) {
  // Slots with id < 0 (experts held elsewhere) take no place in the groups.
  const int idx[6] = {-1, 2,    // token 0
                      0, -1,    // token 1
                      -1, -1};  // token 2: nothing local
  const float w[6] = {0.9f, 0.1f, 0.6f, 0.4f, 0.5f, 0.5f};
  ExpertGroups g;
  group_by_expert({idx, w, 3, 2}, 3, &g);
  EXPECT_EQ(g.tokens_per_expert, (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(g.offsets, (std::vector<int>{0, 1, 1, 2}));
  EXPECT_EQ(g.token_idx, (std::vector<int>{1, 0}));
  EXPECT_EQ(g.weight, (std::vector<float>{0.6f, 0.1f}));
  // All skipped.
  const int none[2] = {-1, -1};
  group_by_expert({none, w, 1, 2}, 3, &g);
  EXPECT_EQ(g.tokens_per_expert, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(g.offsets, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_TRUE(g.token_idx.empty());
  EXPECT_TRUE(g.weight.empty());
}

}  // namespace
}  // namespace moe
