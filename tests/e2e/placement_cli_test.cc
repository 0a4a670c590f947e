// moe placement plan|eval: plans from hand-made load files in each accepted format and
// from the real SGLang DeepSeek-V3 statistics (when present), and a clear error naming
// the problem for every kind of bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "moe/placement/placement_plan.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::CommandResult;
using testing::moe_binary;
using testing::run_command;

CommandResult placement(const std::string& args) { return run_command(moe_binary() + " placement " + args); }

std::string write_temp(const std::string& name, const std::string& text) {
  static const std::string dir = testing::make_temp_dir("placement_cli");
  const std::string path = dir + "/" + name;
  testing::write_file(path, text);
  return path;
}

void expect_error(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 134) << "crashed: " << r.output;
  EXPECT_CONTAINS(r.output, "error:");
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

TEST(PlacementCliTest, PlansHandMadeLoad) {
  const std::string load = write_temp("hot.json", R"({"load": [[10, 1, 1, 1], [1, 1, 1, 1]]})");
  const std::string out = write_temp("hot_plan.json", "");
  auto r = placement("plan --load " + load + " --num-ranks 2 --slots-per-rank 3 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "max/mean before");
  EXPECT_CONTAINS(r.output, "overall");
  EXPECT_CONTAINS(r.output, "planner:");
  // Layer 0: one copy each, {0,1} = 11 vs mean 6.5 -> 1.692; after: 6.5 -> 1.000.
  EXPECT_CONTAINS(r.output, "1.692");
  auto plan = load_plan_file(out);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->num_experts, 4);
  EXPECT_EQ(plan->num_ranks, 2);
  EXPECT_EQ(plan->slots_per_rank, 3);
  ASSERT_EQ(plan->layers.size(), 2u);
  EXPECT_EQ(plan->layers[0].replica_count[0], 2);

  // The JSON report agrees, and eval of the written plan reproduces it.
  auto j = placement("plan --format json --load " + load + " --num-ranks 2 --slots-per-rank 3");
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const auto rep = nlohmann::json::parse(j.output);
  EXPECT_NEAR(rep["layers"][0]["before"]["max_over_mean"].get<double>(), 11.0 / 6.5, 1e-12);
  EXPECT_NEAR(rep["layers"][0]["after"]["max_over_mean"].get<double>(), 1.0, 1e-12);
  auto e = placement("eval --format json --plan " + out + " --load " + load);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto ev = nlohmann::json::parse(e.output);
  EXPECT_DOUBLE_EQ(ev["overall"]["after"]["max_over_mean"].get<double>(),
                   rep["overall"]["after"]["max_over_mean"].get<double>());
}

TEST(PlacementCliTest, AcceptsSglangAndStatsFormats) {
  const std::string sg = write_temp("sg.json", R"({"logical_count": [[0, 0, 0, 0], [4, 3, 2, 1], [1, 2, 3, 4]]})");
  auto r = placement("plan --load " + sg + " --num-ranks 4 --num-nodes 2 --slots-per-rank 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "2 MoE layers x 4 experts (skipped all-zero layers: 0)");
  EXPECT_CONTAINS(r.output, "cross-node");
  const std::string st = write_temp(
      "stats.json", R"({"layers": [{"layer": 1, "tokens_per_expert": [5, 1, 1, 1]}, {"layer": 3, "tokens_per_expert": [1, 1, 1, 5]}]})");
  const std::string out = write_temp("stats_plan.json", "");
  r = placement("plan --load " + st + " --num-ranks 2 --memory-per-rank 350 --expert-bytes 100 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "3 slots per rank");
  auto plan = load_plan_file(out);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->layers[0].layer, 1);
  EXPECT_EQ(plan->layers[1].layer, 3);
  EXPECT_EQ(plan->slots_per_rank, 3);
}

TEST(PlacementCliTest, BadFlags) {
  const std::string load = write_temp("eight.json", R"({"load": [[1, 2, 3, 4, 5, 6, 7, 8]]})");
  const std::string base = "plan --load " + load + " ";
  expect_error(placement(base + "--num-ranks 2 --slots-per-rank 3"),
               {"--slots-per-rank 3", "--num-ranks 2", "too few to hold each of the 8 experts", "at least 4 slots"});
  expect_error(placement(base + "--num-ranks 2 --memory-per-rank 300 --expert-bytes 100"),
               {"--memory-per-rank 300 / --expert-bytes 100 = 3 slots per rank", "too few"});
  expect_error(placement(base + "--num-ranks 6 --num-nodes 4 --slots-per-rank 4"),
               {"--num-ranks 6 is not divisible by --num-nodes 4"});
  expect_error(placement(base + "--num-ranks 2 --slots-per-rank 4 --replica-cap 0"), {"--replica-cap must be >= 1"});
  expect_error(placement(base + "--num-ranks 2"), {"--slots-per-rank"});
  expect_error(placement(base + "--num-ranks 2 --slots-per-rank 4 --memory-per-rank 400"), {"not both"});
  expect_error(placement(base + "--num-ranks 2 --memory-per-rank 400"), {"--expert-bytes"});
  expect_error(placement(base + "--num-ranks 2 --slots-per-rank 4 --num-experts 16"),
               {"has 8 experts per layer, expected --num-experts 16"});
  expect_error(placement(base + "--num-ranks 4 --num-nodes 2 --slots-per-rank 4 --num-groups 3"), {"--num-groups 3"});
  expect_error(placement(base + "--num-ranks 2 --slots-per-rank 4 --algorithm magic"), {"--algorithm", "magic"});
  expect_error(placement("plan --load /nonexistent/load.json --num-ranks 2 --slots-per-rank 4"),
               {"/nonexistent/load.json"});
}

TEST(PlacementCliTest, BadLoadFiles) {
  auto plan_of = [](const std::string& name, const std::string& text) {
    return placement("plan --load " + write_temp(name, text) + " --num-ranks 2 --slots-per-rank 4");
  };
  expect_error(plan_of("ragged.json", R"({"load": [[1, 2, 3, 4], [1, 2, 3]]})"),
               {"ragged.json", "load[1] has 3 experts, expected 4"});
  expect_error(plan_of("neg.json", R"({"load": [[1, 2, -3, 4]]})"), {"neg.json", "load[0][2] is -3"});
  expect_error(plan_of("nan.json", R"({"load": [[1, 2, "NaN", 4]]})"), {"nan.json", "load[0][2]", "not a number"});
  expect_error(plan_of("nanlit.json", R"({"load": [[1, 2, NaN, 4]]})"), {"nanlit.json", "not valid JSON"});
  expect_error(plan_of("what.json", R"({"counts": [[1]]})"), {"what.json", "no 'load', 'logical_count' or 'layers'"});
}

TEST(PlacementCliTest, BadPlanFiles) {
  const std::string load = write_temp("four.json", R"({"load": [[4, 3, 2, 1]]})");
  auto eval_of = [&](const std::string& name, const std::string& text) {
    return placement("eval --plan " + write_temp(name, text) + " --load " + load);
  };
  expect_error(eval_of("ghost.json", R"({"num_experts": 4, "layers": [{"rank_slots": [[0, 1], [2, 9]]}]})"),
               {"ghost.json", "expert 9 does not exist"});
  expect_error(eval_of("missing.json", R"({"layers": [{"rank_slots": [[0, 1], [3]]}]})"),
               {"missing.json", "expert 2 is on no rank"});
  expect_error(eval_of("five.json", R"({"layers": [{"rank_slots": [[0, 1, 2], [3, 4]]}]})"),
               {"has 4 experts per layer but --plan", "places 5"});
  expect_error(eval_of("layer9.json", R"({"layers": [{"layer": 9, "rank_slots": [[0, 1], [2, 3]]}]})"),
               {"has no layer 0"});
  const std::string ok = write_temp("ok.json", R"({"layers": [{"rank_slots": [[0, 1], [2, 3]]}]})");
  expect_error(placement("eval --plan " + ok + " --load " + load + " --num-nodes 3"), {"--num-nodes 3"});
  auto r = placement("eval --plan " + ok + " --load " + load);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(PlacementCliTest, MinReplicas) {
  // 4 experts, 2 ranks x 4 slots, --min-replicas 2: the floor takes every slot, so each
  // rank holds every expert (hand-computed), whatever the load.
  const std::string load = write_temp("mr.json", R"({"load": [[10, 1, 1, 1], [0, 0, 0, 0]]})");
  const std::string out = write_temp("mr_plan.json", "");
  auto r = placement("plan --load " + load + " --num-ranks 2 --slots-per-rank 4 --min-replicas 2 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "replica cap 4, min replicas 2");
  auto plan = load_plan_file(out);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const auto& L : plan->layers) {
    EXPECT_EQ(L.rank_slots, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {0, 1, 2, 3}})) << "layer " << L.layer;
  }
  auto j = placement("plan --format json --load " + load + " --num-ranks 2 --slots-per-rank 4 --min-replicas 2");
  ASSERT_EQ(j.exit_code, 0) << j.output;
  EXPECT_EQ(nlohmann::json::parse(j.output)["min_replicas"].get<int>(), 2);
  // The default is 1 and says so.
  r = placement("plan --load " + load + " --num-ranks 2 --slots-per-rank 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "min replicas 1");
  auto help = placement("plan --help");
  EXPECT_CONTAINS(help.output, "--min-replicas");

  const std::string eight = write_temp("mr8.json", R"({"load": [[1, 2, 3, 4, 5, 6, 7, 8]]})");
  const std::string base = "plan --load " + eight + " --num-ranks 4 --num-nodes 2 ";
  expect_error(placement(base + "--slots-per-rank 4 --min-replicas 0"), {"--min-replicas must be >= 1 (got 0)"});
  expect_error(placement(base + "--slots-per-rank 4 --replica-cap 2 --min-replicas 3"),
               {"--min-replicas 3 exceeds --replica-cap 2"});
  expect_error(placement(base + "--slots-per-rank 8 --replica-cap 8 --min-replicas 5"),
               {"--min-replicas 5 exceeds --num-ranks 4"});
  expect_error(placement(base + "--slots-per-rank 8 --num-groups 2 --min-replicas 3"),
               {"--min-replicas 3 exceeds the 2 ranks per node", "--num-groups"});
  expect_error(placement(base + "--slots-per-rank 5 --min-replicas 3"),
               {"--min-replicas 3: not enough slots: need 24 (8 experts x 3), have 20", "at least 6 slots per rank"});
  expect_error(placement(base + "--memory-per-rank 500 --expert-bytes 100 --min-replicas 3"),
               {"--min-replicas 3: not enough slots", "--memory-per-rank 500 / --expert-bytes 100"});
  r = placement(base + "--slots-per-rank 6 --min-replicas 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(PlacementCliTest, RealDeepSeekV3Statistics) {
  const std::string path =
      moe::testing::shared_data_dir() + "/routing/sglang_deepseek_v3_ep_statistics/decode_in1000out1000.json";
  MOE_SKIP_IF_MISSING(path);
  const std::string out = write_temp("dsv3_plan.json", "");
  auto r = placement("plan --format json --load " + path +
                     " --num-ranks 16 --num-nodes 2 --slots-per-rank 18 --num-experts 256 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rep = nlohmann::json::parse(r.output);
  EXPECT_EQ(rep["num_layers"].get<int>(), 58);
  EXPECT_EQ(rep["skipped_zero_layers"], nlohmann::json({0, 1, 2}));
  const auto& o = rep["overall"];
  EXPECT_GT(o["before"]["max_over_mean"].get<double>(), 2.0);
  EXPECT_LT(o["after"]["max_over_mean"].get<double>(), 1.01);
  EXPECT_LT(o["after"]["cross_node_share"].get<double>(), o["before"]["cross_node_share"].get<double>());
  auto plan = load_plan_file(out);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->num_experts, 256);
  EXPECT_EQ(plan->layers.front().layer, 3);
  EXPECT_EQ(plan->layers.back().layer, 60);
  for (const auto& L : plan->layers) {
    int slots = 0;
    for (const auto& s : L.rank_slots) slots += static_cast<int>(s.size());
    EXPECT_EQ(slots, 16 * 18) << "layer " << L.layer;  // every slot used
  }
}

}  // namespace
}  // namespace moe
