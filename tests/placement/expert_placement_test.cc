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

}  // namespace
}  // namespace moe
