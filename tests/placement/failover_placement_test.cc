// survivor_placement, rereplication_target and added_replicas on hand-computed cases:
// 2, 3 and 4 ranks, replicas on dead ranks, every replica of an expert dead, a full
// budget, loads that decide ties, and every error path.
#include "moe/placement/failover_placement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "contains_util.h"

namespace moe {
namespace {

using Slots = std::vector<std::vector<int>>;

ExpertPlacement slots(const Slots& s, int experts) { return ExpertPlacement::from_rank_slots(s, experts).value(); }

TEST(FailoverPlacementTest, TwoRanksOneDiesEverythingOnTheSurvivor) {
  const ExpertPlacement old = ExpertPlacement::contiguous(4, 2);  // {0,1} {2,3}
  const ExpertPlacement deg = survivor_placement(old, {0}).value();
  EXPECT_EQ(deg.num_ranks(), 1);
  EXPECT_EQ(deg.rank_slots(), (Slots{{0, 1}}));
  EXPECT_EQ(deg.lost_experts(), (std::vector<int>{2, 3}));
  // Room for all four.
  const ExpertPlacement full = rereplication_target(deg, 4, {}).value();
  EXPECT_EQ(full.rank_slots(), (Slots{{0, 1, 2, 3}}));
  EXPECT_EQ(full.num_lost(), 0);
  // Budget 3: expert 2 fills the last slot, expert 3 goes over it by one.
  const ExpertPlacement over = rereplication_target(deg, 3, {}).value();
  EXPECT_EQ(over.rank_slots(), (Slots{{0, 1, 2, 3}}));
  EXPECT_EQ(over.max_experts_per_rank(), 4);
  EXPECT_EQ(added_replicas(deg, over), (std::vector<ReplicaAddition>{{2, 0}, {3, 0}}));
}

TEST(FailoverPlacementTest, ThreeRanksReplicasOnTheDeadRankSurvive) {
  // Old: r0 {0,1,4}, r1 {1,2,5}, r2 {3,4,5}. Rank 1 dies: experts 1 and 5 keep their
  // copies on old ranks 0 and 2, expert 2 (only on rank 1) is lost. Old rank 2 is new 1.
  const ExpertPlacement old = slots({{0, 1, 4}, {1, 2, 5}, {3, 4, 5}}, 6);
  const ExpertPlacement deg = survivor_placement(old, {0, 2}).value();
  EXPECT_EQ(deg.rank_slots(), (Slots{{0, 1, 4}, {3, 4, 5}}));
  EXPECT_EQ(deg.lost_experts(), (std::vector<int>{2}));
  EXPECT_EQ(deg.replicas(4), (std::vector<int>{0, 1}));
  EXPECT_EQ(deg.replicas(5), (std::vector<int>{1}));
  // Both hold 3 experts. Loads [1,2,8,1,4,3]: rank 0 = 1 + 2 + 4/2 = 5, rank 1 =
  // 1 + 4/2 + 3 = 6 -> rank 0 (lower load).
  const ExpertPlacement target = rereplication_target(deg, 4, {1, 2, 8, 1, 4, 3}).value();
  EXPECT_EQ(target.rank_slots(), (Slots{{0, 1, 2, 4}, {3, 4, 5}}));
  EXPECT_EQ(added_replicas(deg, target), (std::vector<ReplicaAddition>{{2, 0}}));
  // Rank 0 heavier: loads [9,2,8,1,4,3] -> rank 0 = 9 + 2 + 2 = 13, rank 1 = 6 -> rank 1.
  const ExpertPlacement other = rereplication_target(deg, 4, {9, 2, 8, 1, 4, 3}).value();
  EXPECT_EQ(other.rank_slots(), (Slots{{0, 1, 4}, {2, 3, 4, 5}}));
  // Nothing lost: the same placement back.
  EXPECT_EQ(rereplication_target(target, 4, {}).value(), target);
  // No rank dead: the survivors' placement is the old one.
  EXPECT_EQ(survivor_placement(old, {0, 1, 2}).value(), old);
}

TEST(FailoverPlacementTest, FourRanksTwoDeadAllReplicasOfAnExpertDead) {
  // Old: r0 {0,1}, r1 {0,2,3}, r2 {4,5}, r3 {2,6,7}. Ranks 1 and 3 die: expert 2 loses
  // both copies, 3, 6, 7 their only one; expert 0 survives on rank 0.
  const ExpertPlacement old = slots({{0, 1}, {0, 2, 3}, {4, 5}, {2, 6, 7}}, 8);
  const ExpertPlacement deg = survivor_placement(old, {0, 2}).value();
  EXPECT_EQ(deg.rank_slots(), (Slots{{0, 1}, {4, 5}}));
  EXPECT_EQ(deg.lost_experts(), (std::vector<int>{2, 3, 6, 7}));
  // Loads [0,0,1,5,0,0,5,2]: order 3, 6 (tie at 5: lower id first), 7, 2.
  //   3: held 2/2, load 0/0 -> rank 0 (load 5)
  //   6: held 3/2           -> rank 1 (load 5)
  //   7: held 3/3, load 5/5 -> rank 0 (lower rank)
  //   2: held 4/3           -> rank 1
  const std::vector<double> load{0, 0, 1, 5, 0, 0, 5, 2};
  const ExpertPlacement target = rereplication_target(deg, 4, load).value();
  EXPECT_EQ(target.rank_slots(), (Slots{{0, 1, 3, 7}, {2, 4, 5, 6}}));
  EXPECT_EQ(target.max_experts_per_rank(), 4);
  EXPECT_EQ(added_replicas(deg, target), (std::vector<ReplicaAddition>{{2, 1}, {3, 0}, {6, 1}, {7, 0}}));
  // Without loads: ids ascending, alternating by held count: 2 -> 0, 3 -> 1, 6 -> 0, 7 -> 1.
  EXPECT_EQ(rereplication_target(deg, 4, {}).value().rank_slots(), (Slots{{0, 1, 2, 6}, {3, 4, 5, 7}}));
  // Renumbering: old ranks 1..3 survive -> new ranks 0..2.
  const ExpertPlacement tail = survivor_placement(old, {1, 2, 3}).value();
  EXPECT_EQ(tail.rank_slots(), (Slots{{0, 2, 3}, {4, 5}, {2, 6, 7}}));
  EXPECT_EQ(tail.lost_experts(), (std::vector<int>{1}));
  // Expert 1 goes to new rank 1 (2 experts, fewest).
  EXPECT_EQ(rereplication_target(tail, 3, {}).value().rank_slots(), (Slots{{0, 2, 3}, {1, 4, 5}, {2, 6, 7}}));
}

TEST(FailoverPlacementTest, BudgetFullEachSurvivorExceedsByOne) {
  // contiguous(6, 3) with 2 slots per rank, every slot used; rank 2 dies.
  const ExpertPlacement deg = survivor_placement(ExpertPlacement::contiguous(6, 3), {0, 1}).value();
  EXPECT_EQ(deg.lost_experts(), (std::vector<int>{4, 5}));
  const ExpertPlacement target = rereplication_target(deg, 2, {}).value();
  EXPECT_EQ(target.rank_slots(), (Slots{{0, 1, 4}, {2, 3, 5}}));
  EXPECT_EQ(target.max_experts_per_rank(), 3);  // budget 2 + 1
  // Rank 0 dies instead, loads [1,3,10,0,2,2]: new ranks {2,3} (load 10) and {4,5}
  // (load 4). Expert 1 (load 3) first -> rank 1 (tie on held, lower load); then expert 0
  // -> rank 0 (fewer held).
  const ExpertPlacement deg0 = survivor_placement(ExpertPlacement::contiguous(6, 3), {1, 2}).value();
  EXPECT_EQ(rereplication_target(deg0, 3, {1, 3, 10, 0, 2, 2}).value().rank_slots(), (Slots{{0, 2, 3}, {1, 4, 5}}));
}

TEST(FailoverPlacementTest, BadArgumentsAreNamed) {
  const ExpertPlacement old = ExpertPlacement::contiguous(4, 3);
  auto empty = survivor_placement(old, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_CONTAINS(empty.status().message(), "members is empty");
  auto unsorted = survivor_placement(old, {1, 0});
  ASSERT_FALSE(unsorted.ok());
  EXPECT_CONTAINS(unsorted.status().message(), "members[1] = 0 after 1");
  auto dup = survivor_placement(old, {1, 1});
  ASSERT_FALSE(dup.ok());
  EXPECT_CONTAINS(dup.status().message(), "strictly ascending");
  auto range = survivor_placement(old, {0, 3});
  ASSERT_FALSE(range.ok());
  EXPECT_CONTAINS(range.status().message(), "members[1] = 3 is not a rank of the old group [0, 3)");
  auto negative = survivor_placement(old, {-1});
  ASSERT_FALSE(negative.ok());
  EXPECT_CONTAINS(negative.status().message(), "members[0] = -1");

  const ExpertPlacement deg = survivor_placement(old, {0, 1}).value();
  auto slots0 = rereplication_target(deg, 0, {});
  ASSERT_FALSE(slots0.ok());
  EXPECT_CONTAINS(slots0.status().message(), "slots_per_rank must be >= 1 (got 0)");
  auto size = rereplication_target(deg, 2, {1, 2});
  ASSERT_FALSE(size.ok());
  EXPECT_CONTAINS(size.status().message(), "expert_load has 2 entries for 4 experts");
  auto neg = rereplication_target(deg, 2, {1, 2, -1, 0});
  ASSERT_FALSE(neg.ok());
  EXPECT_CONTAINS(neg.status().message(), "expert_load[2]");
  auto nan = rereplication_target(deg, 2, {std::nan(""), 0, 0, 0});
  ASSERT_FALSE(nan.ok());
  EXPECT_CONTAINS(nan.status().message(), "expert_load[0]");
  auto inf = rereplication_target(deg, 2, {0, std::numeric_limits<double>::infinity(), 0, 0});
  ASSERT_FALSE(inf.ok());
  EXPECT_CONTAINS(inf.status().message(), "expert_load[1]");
}

}  // namespace
}  // namespace moe
