// Placement plan files: JSON round trip, defaults, validation errors naming the problem.
#include "moe/placement/placement_plan.h"

#include <gtest/gtest.h>

#include "contains_util.h"
#include "test_util.h"

namespace moe {
namespace {

PlacementPlan sample_plan() {
  PlacementPlan p;
  p.num_experts = 4;
  p.num_ranks = 2;
  p.slots_per_rank = 3;
  LayerPlan a;
  a.layer = 3;
  a.rank_slots = {{0, 1, 2}, {0, 3}};
  a.replica_count = {2, 1, 1, 1};
  LayerPlan b;
  b.layer = 5;
  b.rank_slots = {{3}, {0, 1, 2}};
  b.replica_count = {1, 1, 1, 1};
  p.layers = {a, b};
  return p;
}

void expect_same(const PlacementPlan& x, const PlacementPlan& y) {
  EXPECT_EQ(x.num_experts, y.num_experts);
  EXPECT_EQ(x.num_ranks, y.num_ranks);
  EXPECT_EQ(x.slots_per_rank, y.slots_per_rank);
  ASSERT_EQ(x.layers.size(), y.layers.size());
  for (size_t i = 0; i < x.layers.size(); ++i) {
    EXPECT_EQ(x.layers[i].layer, y.layers[i].layer);
    EXPECT_EQ(x.layers[i].rank_slots, y.layers[i].rank_slots);
    EXPECT_EQ(x.layers[i].replica_count, y.layers[i].replica_count);
  }
}

TEST(PlacementPlanTest, JsonRoundTrip) {
  const PlacementPlan p = sample_plan();
  ASSERT_TRUE(validate_plan(p).ok());
  const std::string text = plan_to_json(p);
  EXPECT_CONTAINS(text, R"({"layer":3,"rank_slots":[[0,1,2],[0,3]],"replica_count":[2,1,1,1]})");
  auto back = parse_plan_json(text, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(p, *back);
  EXPECT_EQ(plan_to_json(*back), text);
}

TEST(PlacementPlanTest, FileRoundTrip) {
  const std::string dir = testing::make_temp_dir("placement_plan");
  const std::string path = dir + "/plan.json";
  ASSERT_TRUE(write_plan_file(sample_plan(), path).ok());
  auto back = load_plan_file(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(sample_plan(), *back);
  Status bad = write_plan_file(sample_plan(), dir + "/no/such/dir/plan.json");
  EXPECT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.message(), "no/such/dir/plan.json");
  auto missing = load_plan_file(dir + "/missing.json");
  EXPECT_FALSE(missing.ok());
  EXPECT_CONTAINS(missing.status().message(), "missing.json");
}

TEST(PlacementPlanTest, OnlyRankSlotsRequired) {
  auto p = parse_plan_json(R"({"layers": [{"rank_slots": [[0, 2], [1, 2]]}, {"rank_slots": [[2], [0, 1]]}]})", "m.json");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->num_experts, 3);
  EXPECT_EQ(p->num_ranks, 2);
  EXPECT_EQ(p->slots_per_rank, 2);
  EXPECT_EQ(p->layers[0].layer, 0);
  EXPECT_EQ(p->layers[1].layer, 1);
  EXPECT_EQ(p->layers[0].replica_count, (std::vector<int>{1, 1, 2}));
}

void expect_bad(const std::string& text, std::initializer_list<std::string> needles) {
  auto p = parse_plan_json(text, "bad.json");
  ASSERT_FALSE(p.ok()) << text;
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(p.status().message(), "bad.json");
  for (const auto& n : needles) EXPECT_CONTAINS(p.status().message(), n);
}

TEST(PlacementPlanTest, BadFiles) {
  expect_bad("[1", {"not valid JSON"});
  expect_bad("{}", {"'layers' is missing"});
  expect_bad(R"({"layers": []})", {"'layers' must be a non-empty list"});
  expect_bad(R"({"layers": [{"replica_count": [1]}]})", {"layers[0]", "'rank_slots' is missing"});
  // An expert that does not exist.
  expect_bad(R"({"num_experts": 4, "layers": [{"rank_slots": [[0, 1], [2, 7]]}]})",
             {"layers[0].rank_slots[1][1]", "expert 7 does not exist", "num_experts 4"});
  expect_bad(R"({"layers": [{"rank_slots": [[0, -1]]}]})", {"rank_slots[0][1]", "integer >= 0"});
  expect_bad(R"({"layers": [{"rank_slots": [[0, "x"]]}]})", {"rank_slots[0][1]"});
  // One left out: expert 2 (ids go up to 3) is nowhere.
  expect_bad(R"({"layers": [{"rank_slots": [[0, 1], [3]]}]})", {"layers[0]", "expert 2 is on no rank"});
  expect_bad(R"({"num_experts": 5, "layers": [{"rank_slots": [[0, 1], [2, 3]]}]})", {"expert 4 is on no rank"});
  // Twice on one rank.
  expect_bad(R"({"layers": [{"rank_slots": [[0, 1, 0], [2]]}]})", {"expert 0 appears twice on rank 0"});
  // replica_count disagreeing with rank_slots, or of the wrong length.
  expect_bad(R"({"layers": [{"rank_slots": [[0, 1], [0, 2]], "replica_count": [1, 1, 1]}]})",
             {"layers[0].replica_count[0] is 1 but expert 0 is on 2 rank(s)"});
  expect_bad(R"({"layers": [{"rank_slots": [[0, 1], [2]], "replica_count": [1, 1]}]})",
             {"replica_count has 2 entries, expected 3"});
  // Rank and slot counts.
  expect_bad(R"({"layers": [{"rank_slots": [[0], [1]]}, {"rank_slots": [[0, 1]]}]})",
             {"layers[1].rank_slots has 1 ranks, expected 2"});
  expect_bad(R"({"num_ranks": 3, "layers": [{"rank_slots": [[0], [1]]}]})", {"has 2 ranks, expected 3"});
  expect_bad(R"({"slots_per_rank": 1, "layers": [{"rank_slots": [[0, 1], [2]]}]})",
             {"rank 0 holds 2 experts, more than slots_per_rank 1"});
  expect_bad(R"({"num_experts": 0, "layers": [{"rank_slots": [[0]]}]})", {"'num_experts' must be an integer >= 1"});
  expect_bad(R"({"layers": [{"layer": 1, "rank_slots": [[0]]}, {"layer": 1, "rank_slots": [[0]]}]})",
             {"layers[1]: layer 1 appears twice"});
}

TEST(PlacementPlanTest, ValidateInMemory) {
  PlacementPlan p = sample_plan();
  p.layers[0].rank_slots[1] = {3};  // expert 0 now on one rank, but replica_count says 2
  Status st = validate_plan(p);
  ASSERT_FALSE(st.ok());
  EXPECT_CONTAINS(st.message(), "replica_count[0] is 2 but expert 0 is on 1 rank(s)");
  p = sample_plan();
  p.layers[1].rank_slots = {{3}, {0, 1}};
  st = validate_plan(p);
  EXPECT_CONTAINS(st.message(), "layers[1]: expert 2 is on no rank");
  EXPECT_FALSE(write_plan_file(p, "/tmp/never_written.json").ok());
  EXPECT_EQ(count_replicas(sample_plan().layers[0], 4), (std::vector<int>{2, 1, 1, 1}));
}

}  // namespace
}  // namespace moe
