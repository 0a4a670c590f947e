// The contiguous rule (contiguous_expert_range, once for ExpertPlacement::contiguous and
// contiguous_plan) and the conversions between a plan file's LayerPlan and ExpertPlacement.
#include "moe/placement/expert_placement.h"

#include <gtest/gtest.h>

#include <vector>

#include "contains_util.h"
#include "moe/placement/placement_plan.h"
#include "moe/placement/replica_planner.h"

namespace moe {
namespace {

TEST(ExpertPlacementTest, ContiguousRange) {
  EXPECT_EQ(contiguous_expert_range(0, 8, 3).begin, 0);
  EXPECT_EQ(contiguous_expert_range(0, 8, 3).end, 2);
  EXPECT_EQ(contiguous_expert_range(1, 8, 3).begin, 2);
  EXPECT_EQ(contiguous_expert_range(1, 8, 3).end, 5);
  EXPECT_EQ(contiguous_expert_range(2, 8, 3).end, 8);
  // More ranks than experts: some ranks hold none.
  const ExpertRange r = contiguous_expert_range(0, 2, 4);
  EXPECT_EQ(r.begin, r.end);
}

TEST(ExpertPlacementTest, RankSlotsAndReplicaCounts) {
  const ExpertPlacement p = ExpertPlacement::from_rank_slots({{1}, {0}, {0, 2}, {0, 2}}, 3).value();
  EXPECT_EQ(p.rank_slots(), (std::vector<std::vector<int>>{{1}, {0}, {0, 2}, {0, 2}}));
  EXPECT_EQ(p.replica_counts(), (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(ExpertPlacement::contiguous(8, 3).rank_slots(),
            (std::vector<std::vector<int>>{{0, 1}, {2, 3, 4}, {5, 6, 7}}));
}

TEST(ExpertPlacementTest, ContiguousPlanIsTheContiguousPlacement) {
  const PlacementPlan plan = contiguous_plan(8, 3, {5, 9});
  ASSERT_EQ(plan.layers.size(), 2u);
  for (const LayerPlan& L : plan.layers) {
    auto p = layer_placement(L, plan.num_experts);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(*p, ExpertPlacement::contiguous(8, 3));
    EXPECT_EQ(L.replica_count, std::vector<int>(8, 1));
  }
  EXPECT_EQ(plan.layers[1].layer, 9);
}

TEST(ExpertPlacementTest, LayerPlanRoundTrip) {
  const ExpertPlacement p = ExpertPlacement::from_rank_slots({{0, 3}, {1, 3}, {2}}, 4).value();
  const LayerPlan L = to_layer_plan(p, 7);
  EXPECT_EQ(L.layer, 7);
  EXPECT_EQ(L.replica_count, (std::vector<int>{1, 1, 1, 2}));
  EXPECT_EQ(layer_placement(L, 4).value(), p);
  LayerPlan bad = L;
  bad.rank_slots[2] = {};  // expert 2 on no rank
  auto st = layer_placement(bad, 4);
  ASSERT_FALSE(st.ok());
  EXPECT_CONTAINS(st.status().message(), "expert 2 on no rank");
}

TEST(ExpertPlacementTest, LostExpertsOnlyWhenAllowed) {
  const std::vector<std::vector<int>> slots{{0, 3}, {3}, {}};  // experts 1 and 2 on no rank
  auto refused = ExpertPlacement::from_rank_slots(slots, 4);
  ASSERT_FALSE(refused.ok());
  EXPECT_CONTAINS(refused.status().message(), "expert 1 on no rank");
  auto refused_explicitly = ExpertPlacement::from_rank_slots(slots, 4, LostExperts::kRefuse);
  ASSERT_FALSE(refused_explicitly.ok());

  const ExpertPlacement p = ExpertPlacement::from_rank_slots(slots, 4, LostExperts::kAllow).value();
  EXPECT_EQ(p.num_ranks(), 3);
  EXPECT_EQ(p.num_lost(), 2);
  EXPECT_EQ(p.lost_experts(), (std::vector<int>{1, 2}));
  EXPECT_FALSE(p.is_lost(0));
  EXPECT_TRUE(p.is_lost(1));
  EXPECT_TRUE(p.is_lost(2));
  EXPECT_FALSE(p.is_lost(3));
  EXPECT_EQ(p.alive_mask(), (std::vector<uint8_t>{1, 0, 0, 1}));
  EXPECT_EQ(p.rank_of(0), 0);
  EXPECT_DEATH((void)p.rank_of(1), "MOE_CHECK");  // never .front() of an empty list
  EXPECT_TRUE(p.replicas(2).empty());
  EXPECT_EQ(p.replicas(3), (std::vector<int>{0, 1}));
  EXPECT_TRUE(p.has_replicas());
  EXPECT_EQ(p.replica_counts(), (std::vector<int>{1, 0, 0, 2}));
  EXPECT_EQ(p.rank_slots(), slots);
  EXPECT_EQ(p.experts_on(2), std::vector<int>{});
  EXPECT_EQ(p.max_experts_per_rank(), 2);
  // The other checks still apply.
  auto bad = ExpertPlacement::from_rank_slots({{0, 0}}, 2, LostExperts::kAllow);
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), "expert 0 twice on rank 0");
  auto out_of_range = ExpertPlacement::from_rank_slots({{5}}, 2, LostExperts::kAllow);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_CONTAINS(out_of_range.status().message(), "expert 5 on rank 0");
  // A plan file's layer keeps refusing a lost expert (layer_placement, above), and a
  // placement without lost experts reports none.
  const ExpertPlacement c = ExpertPlacement::contiguous(8, 3);
  EXPECT_EQ(c.num_lost(), 0);
  EXPECT_TRUE(c.lost_experts().empty());
  EXPECT_EQ(c.alive_mask(), std::vector<uint8_t>(8, 1));
}

}  // namespace
}  // namespace moe
