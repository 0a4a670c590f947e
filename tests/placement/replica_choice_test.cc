// choose_replicas / choose_replica_on_node on hand-computed cases: same rank, then
// same node, then remote; balanced by the load already assigned in the step.
#include "moe/placement/replica_choice.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

// 4 ranks on 2 nodes {0,1} {2,3}. Expert 0 on ranks 1, 2, 3; expert 1 on 0; expert 2
// on 2 and 3.
ExpertPlacement placement() { return ExpertPlacement::from_rank_slots({{1}, {0}, {0, 2}, {0, 2}}, 3).value(); }
const std::vector<int> kNodes = {0, 0, 1, 1};

TEST(ReplicaChoiceTest, LocalityThenLoad) {
  const ExpertPlacement p = placement();
  // Rank 0: token 0 -> [0, 1], token 1 -> [2, 0], token 2 -> [2, 1], token 3 -> [-1, 2].
  const int idx[8] = {0, 1, 2, 0, 2, 1, -1, 2};
  int assign[8];
  std::vector<int64_t> load;
  choose_replicas(p, idx, 4, 2, 0, kNodes, &load, assign);
  // expert 0 -> rank 1 (same node) every time, even with load; expert 1 -> rank 0
  // (itself); expert 2 (remote only) -> rank 2, then 3 (less loaded), then 2 (tie at 1:
  // lower rank).
  const int want[8] = {1, 0, 2, 1, 3, 0, -1, 2};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(assign[i], want[i]) << "assignment " << i;
  EXPECT_EQ(load, (std::vector<int64_t>{2, 2, 2, 1}));
}

TEST(ReplicaChoiceTest, OwnReplicaFirst) {
  const ExpertPlacement p = placement();
  const int idx[2] = {0, 2};
  int assign[2];
  std::vector<int64_t> load;
  choose_replicas(p, idx, 1, 2, 3, kNodes, &load, assign);
  EXPECT_EQ(assign[0], 3);
  EXPECT_EQ(assign[1], 3);
}

TEST(ReplicaChoiceTest, GatewayPicksInsideItsNode) {
  const ExpertPlacement p = placement();
  std::vector<int64_t> load(4, 0);
  // Gateway rank 2 on node 1 holds expert 0: itself.
  EXPECT_EQ(choose_replica_on_node(p, 0, 1, 2, kNodes, &load), 2);
  // Gateway rank 1 (node 0) for expert 2 on node 1: ranks 2 (load 1 now) and 3 -> 3.
  EXPECT_EQ(choose_replica_on_node(p, 2, 1, 1, kNodes, &load), 3);
  // Expert 1 has no replica on node 1.
  EXPECT_EQ(choose_replica_on_node(p, 1, 1, 2, kNodes, &load), -1);
}

}  // namespace
}  // namespace moe
