// Dispatch layout arithmetic on hand-made routings (every expected value worked out by
// hand in the comments), and expert placement maps.
#include <gtest/gtest.h>

#include "moe/moe/dispatch_layout.h"
#include "moe/placement/expert_placement.h"
#include "moe/placement/replica_choice.h"

#include <cmath>

namespace moe {
namespace {

std::vector<int> expert_rank(const ExpertPlacement& p) {
  std::vector<int> out;
  for (int e = 0; e < p.num_experts(); ++e) out.push_back(p.rank_of(e));
  return out;
}

TEST(ExpertPlacement, ContiguousEvenUnevenAndMoreRanksThanExperts) {
  EXPECT_EQ(expert_rank(ExpertPlacement::contiguous(8, 4)), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(expert_rank(ExpertPlacement::contiguous(8, 3)), (std::vector<int>{0, 0, 1, 1, 1, 2, 2, 2}));
  const ExpertPlacement p = ExpertPlacement::contiguous(2, 4);
  EXPECT_EQ(expert_rank(p), (std::vector<int>{1, 3}));
  EXPECT_TRUE(p.experts_on(0).empty());
  EXPECT_EQ(p.experts_on(3), (std::vector<int>{1}));
}

TEST(ExpertPlacement, FromMapRejectsRankOutOfRange) {
  auto p = ExpertPlacement::from_map({0, 1, 2}, 2);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("expert 2 on rank 2"), std::string::npos) << p.status().message();
  EXPECT_TRUE(ExpertPlacement::from_map({1, 0, 1}, 2).ok());
}

TEST(ExpertPlacement, FromRankSlotsWithReplicas) {
  // 3 ranks; expert 0 on ranks 0 and 2, expert 1 on 1, expert 2 on 1 and 2.
  auto p = ExpertPlacement::from_rank_slots({{0}, {2, 1}, {0, 2}}, 3);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->has_replicas());
  EXPECT_EQ(p->replicas(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(p->replicas(1), (std::vector<int>{1}));
  EXPECT_EQ(p->replicas(2), (std::vector<int>{1, 2}));
  EXPECT_EQ(p->rank_of(2), 1);
  EXPECT_TRUE(p->holds(2, 0));
  EXPECT_FALSE(p->holds(1, 0));
  EXPECT_EQ(p->experts_on(1), (std::vector<int>{1, 2}));
  EXPECT_EQ(p->max_experts_per_rank(), 2);
}

TEST(ExpertPlacement, FromRankSlotsErrorsNameTheProblem) {
  auto missing = ExpertPlacement::from_rank_slots({{0}, {2}}, 3);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("expert 1 on no rank"), std::string::npos) << missing.status().message();
  auto twice = ExpertPlacement::from_rank_slots({{0, 1, 0}, {2}}, 3);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("expert 0 twice on rank 0"), std::string::npos) << twice.status().message();
  auto range = ExpertPlacement::from_rank_slots({{0, 1}, {2, 7}}, 3);
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("expert 7 on rank 1"), std::string::npos) << range.status().message();
}

// 4 tokens, top-2, 8 experts on 4 ranks (rank r holds experts 2r, 2r+1).
//   t0: [0, 1] -> rank 0 only (sent once)
//   t1: [2, 7] -> ranks 1 and 3
//   t2: [5, 4] -> rank 2 only
//   t3: [6, 0] -> ranks 3 and 0
TEST(DispatchLayout, HandComputedFourRanks) {
  const int topk[] = {0, 1, 2, 7, 5, 4, 6, 0};
  const float w[] = {0.6f, 0.4f, 0.7f, 0.3f, 0.55f, 0.45f, 0.8f, 0.2f};
  DispatchLayout L;
  ASSERT_TRUE(compute_dispatch_layout({topk, w, 4, 2}, ExpertPlacement::contiguous(8, 4), &L).ok());
  EXPECT_EQ(L.num_tokens_per_rank, (std::vector<int>{2, 1, 1, 2}));
  EXPECT_EQ(L.num_tokens_per_expert, (std::vector<int>{2, 1, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(L.send_offsets, (std::vector<int>{0, 2, 3, 4, 6}));
  EXPECT_EQ(L.send_token_idx, (std::vector<int>{0, 3, 1, 2, 1, 3}));
  EXPECT_EQ(L.send_expert, (std::vector<int>{0, 1, -1, 0, 2, -1, 5, 4, -1, 7, 6, -1}));
  EXPECT_EQ(L.send_weight, (std::vector<float>{0.6f, 0.4f, 0, 0.2f, 0.7f, 0, 0.55f, 0.45f, 0, 0.3f, 0.8f, 0}));
  EXPECT_EQ(L.is_token_in_rank,
            (std::vector<uint8_t>{1, 0, 0, 0, /*t1*/ 0, 1, 0, 1, /*t2*/ 0, 0, 1, 0, /*t3*/ 1, 0, 0, 1}));
  EXPECT_EQ(L.total_send(), 6);
}

TEST(DispatchLayout, ZeroTokensGivesEmptyLayout) {
  DispatchLayout L;
  ASSERT_TRUE(compute_dispatch_layout({nullptr, nullptr, 0, 2}, ExpertPlacement::contiguous(8, 3), &L).ok());
  EXPECT_EQ(L.num_tokens_per_rank, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(L.send_offsets, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(L.total_send(), 0);
}

TEST(DispatchLayout, AllTokensToOneExpertLeaveOtherRanksIdle) {
  // 5 tokens all choose expert 3 (rank 1 of 3: experts {2,3,4}) first and expert 2 second.
  std::vector<int> topk;
  std::vector<float> w;
  for (int t = 0; t < 5; ++t) {
    topk.insert(topk.end(), {3, 2});
    w.insert(w.end(), {0.9f, 0.1f});
  }
  DispatchLayout L;
  ASSERT_TRUE(compute_dispatch_layout({topk.data(), w.data(), 5, 2}, ExpertPlacement::contiguous(8, 3), &L).ok());
  EXPECT_EQ(L.num_tokens_per_rank, (std::vector<int>{0, 5, 0}));
  EXPECT_EQ(L.num_tokens_per_expert, (std::vector<int>{0, 0, 5, 5, 0, 0, 0, 0}));
  EXPECT_EQ(L.send_offsets, (std::vector<int>{0, 0, 5, 5}));
}

TEST(DispatchLayout, DuplicateExpertInRowIsRejectedNamingTokenAndExpert) {
  const int topk[] = {0, 1, 3, 3};
  const float w[] = {0.5f, 0.5f, 0.5f, 0.5f};
  DispatchLayout L;
  Status st = compute_dispatch_layout({topk, w, 2, 2}, ExpertPlacement::contiguous(8, 2), &L);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token 1 lists expert 3 twice"), std::string::npos) << st.message();
}

TEST(DispatchLayout, ExpertIdOutOfRangeIsRejected) {
  const int topk[] = {0, 8};
  const float w[] = {0.5f, 0.5f};
  DispatchLayout L;
  Status st = compute_dispatch_layout({topk, w, 1, 2}, ExpertPlacement::contiguous(8, 2), &L);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("expert id 8 outside [0, 8)"), std::string::npos) << st.message();
}

TEST(DispatchLayout, LostExpertIsRejectedWithAndWithoutReplicaChoice) {
  // Expert 2 is on no rank (lost); expert 1 on ranks 0 and 1.
  const ExpertPlacement p = ExpertPlacement::from_rank_slots({{0, 1}, {1, 3}}, 4, LostExperts::kAllow).value();
  const int topk[] = {0, 1, 3, 2};
  const float w[] = {0.5f, 0.5f, 0.5f, 0.5f};
  DispatchLayout L;
  Status st = compute_dispatch_layout({topk, w, 2, 2}, p, &L);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token 1 slot 1: expert 2 is lost"), std::string::npos) << st.message();
  int assign[4];
  std::vector<int64_t> load;
  choose_replicas(p, topk, 2, 2, 0, {0, 0}, &load, assign);
  EXPECT_EQ(assign[3], -1);  // no replica to choose
  EXPECT_EQ(assign[2], 1);
  st = compute_dispatch_layout({topk, w, 2, 2}, p, &L, assign);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("expert 2 is lost"), std::string::npos) << st.message();
  // Without the lost expert the same placement dispatches normally.
  const int ok_topk[] = {0, 1, 3, 1};
  choose_replicas(p, ok_topk, 2, 2, 0, {0, 0}, &load, assign);
  ASSERT_TRUE(compute_dispatch_layout({ok_topk, w, 2, 2}, p, &L, assign).ok());
  EXPECT_EQ(L.num_tokens_per_expert, (std::vector<int>{1, 2, 0, 1}));
}

TEST(DispatchLayout, PermutedPlacementSendsToTheMappedRank) {
  // Expert e on rank (e + 1) % 2: token [0, 2] -> both on rank 1; token [1, 0] -> ranks 0 and 1.
  auto p = ExpertPlacement::from_map({1, 0, 1, 0}, 2);
  ASSERT_TRUE(p.ok());
  const int topk[] = {0, 2, 1, 0};
  const float w[] = {0.5f, 0.5f, 0.6f, 0.4f};
  DispatchLayout L;
  ASSERT_TRUE(compute_dispatch_layout({topk, w, 2, 2}, p.value(), &L).ok());
  EXPECT_EQ(L.num_tokens_per_rank, (std::vector<int>{1, 2}));
  EXPECT_EQ(L.send_token_idx, (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(L.send_expert, (std::vector<int>{1, -1, 0, 2, -1, 0}));
}

}  // namespace
}  // namespace moe

#include "moe/moe/router.h"

namespace moe {
namespace {

// Experts 0,1 on node 0 and 2,3 on node 1; probabilities [0.4, 0.05, 0.3, 0.25].
// Unlimited top-2 = [0, 2] (two nodes). With M = 1: node scores (top-2 sums) are
// 0.45 and 0.55 -> node 1 -> experts [2, 3], weights 0.3/0.55 and 0.25/0.55.
TEST(NodeLimitedRouting, HandComputedOneNode) {
  const float p[] = {0.4f, 0.05f, 0.3f, 0.25f};
  float logits[4];
  for (int i = 0; i < 4; ++i) logits[i] = std::log(p[i]);
  RouterConfig cfg;
  cfg.num_experts = 4;
  cfg.top_k = 2;
  const int expert_node[] = {0, 0, 1, 1};
  int idx[2];
  float w[2];
  route_softmax_topk(cfg, logits, {idx, w, 1, 2});
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 2);
  route_softmax_topk_node_limited(cfg, logits, {expert_node, 2, 1}, {idx, w, 1, 2});
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 3);
  EXPECT_NEAR(w[0], 0.3f / 0.55f, 1e-6);
  EXPECT_NEAR(w[1], 0.25f / 0.55f, 1e-6);
  // M = 2 nodes: no restriction.
  route_softmax_topk_node_limited(cfg, logits, {expert_node, 2, 2}, {idx, w, 1, 2});
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 2);
}

// With one expert per node and top-2, one node cannot hold k experts: a second node
// is added (the next best), so the row stays valid.
TEST(NodeLimitedRouting, AddsNodesWhenTooFewExperts) {
  const float p[] = {0.1f, 0.6f, 0.3f};
  float logits[3];
  for (int i = 0; i < 3; ++i) logits[i] = std::log(p[i]);
  RouterConfig cfg;
  cfg.num_experts = 3;
  cfg.top_k = 2;
  const int expert_node[] = {0, 1, 2};
  int idx[2];
  float w[2];
  route_softmax_topk_node_limited(cfg, logits, {expert_node, 3, 1}, {idx, w, 1, 2});
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 2);
}

}  // namespace
}  // namespace moe
