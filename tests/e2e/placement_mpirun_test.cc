// Expert placement under `mpirun ... moe generate --ep N`: permuted and replicated
// static plans give the single-process tokens and logits; live rebalancing every step
// gives the same text as never rebalancing; --min-replicas plans, start-up placement and
// rebalancing give the same tokens; bad plan files and min-replica violations get clear
// errors on every rank. (A corrupted migration keeping the old plan: tests/runtime/migration_faults_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "contains_util.h"
#include "moe/placement/placement_plan.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::moe_binary;
using testing::run_command;

const char* kPrompt = "KING HENRY IV:\nSo shaken as we are, so wan with care,";

std::string mpirun(int np) { return "timeout 300 mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " "; }

struct GenRun {
  int exit_code = -1;
  std::string output;
  nlohmann::json json;
  std::vector<float> logits;
};

GenRun generate(const std::string& prefix, const std::string& flags, int max_tokens = 24) {
  static const std::string dir = testing::make_temp_dir("placement_mpirun");
  static int counter = 0;
  const std::string logits = dir + "/logits" + std::to_string(counter++) + ".f32";
  auto r = run_command(prefix + moe_binary() + " generate --prompt " + testing::sh_quote(kPrompt) +
                       " --temperature 0 --threads 1 --format json --max-tokens " + std::to_string(max_tokens) +
                       " --logits-out " + logits + " " + flags);
  GenRun out{r.exit_code, r.output, {}, {}};
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') out.json = nlohmann::json::parse(line);
  }
  if (r.exit_code == 0) out.logits = testing::read_f32(logits);
  return out;
}

void expect_same(const GenRun& a, const GenRun& b) {
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(a.json["output_token_ids"], b.json["output_token_ids"]);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  const auto [mn, mx] = std::minmax_element(a.logits.begin(), a.logits.end());
  double max_diff = 0;
  for (size_t i = 0; i < a.logits.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(a.logits[i] - b.logits[i])));
  EXPECT_LE(max_diff / (*mx - *mn), 1e-4);
}

// A plan for the tiny model (8 experts, MoE layers 0-3): rank_slots per layer.
std::string write_plan(const std::string& name, const std::vector<std::vector<std::vector<int>>>& layers) {
  static const std::string dir = testing::make_temp_dir("plans");
  nlohmann::json j;
  j["num_experts"] = 8;
  for (size_t l = 0; l < layers.size(); ++l) j["layers"].push_back({{"layer", l}, {"rank_slots", layers[l]}});
  const std::string path = dir + "/" + name;
  testing::write_file(path, j.dump());
  return path;
}

TEST(PlacementMpirun, PermutedAndReplicatedStaticPlansMatchOneProcess) {
  const GenRun single = generate("", "");
  // 2 ranks: experts permuted (odd ids on rank 0); 4 ranks: every layer different,
  // with replicas of experts 0 and 5.
  const std::string permuted2 = write_plan("p2.json", std::vector<std::vector<std::vector<int>>>(
                                                          4, {{7, 1, 3, 5}, {0, 6, 2, 4}}));
  const std::string replicated4 = write_plan(
      "r4.json", {{{0, 5, 1}, {2, 3, 0}, {4, 5}, {6, 7, 0}},
                  {{7, 6}, {5, 4, 0}, {3, 2, 0}, {1, 0, 5}},
                  {{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 5}, {0, 5}},
                  {{3}, {0, 1, 2}, {4, 5, 6}, {7, 5, 0}}});
  expect_same(single, generate(mpirun(2), "--ep 2 --placement " + permuted2));
  expect_same(single, generate(mpirun(4), "--ep 4 --placement " + replicated4));
  expect_same(single, generate(mpirun(4), "--ep 4 --ranks-per-node 2 --placement " + replicated4));
  expect_same(single, generate(mpirun(4), "--ep 4 --ep-overlap --placement " + replicated4));
}

TEST(PlacementMpirun, RebalancingEveryStepKeepsTheText) {
  const GenRun never = generate(mpirun(2), "--ep 2", 64);
  for (int np : {2, 4}) {
    SCOPED_TRACE("np " + std::to_string(np));
    // Spare slots (3 per rank on 4 ranks, 6 on 2) so the planner also replicates.
    const GenRun every = generate(mpirun(np), "--ep " + std::to_string(np) + " --rebalance-every 1 --rebalance-min-gain 0 --slots-per-rank " +
                                               std::to_string(np == 2 ? 6 : 3), 64);
    ASSERT_EQ(every.exit_code, 0) << every.output;
    EXPECT_EQ(every.json["output_token_ids"], never.json["output_token_ids"]);
    EXPECT_EQ(every.json["text"], never.json["text"]);
    // 63 decode steps: each one plans; a plan is applied unless it predicts no gain.
    EXPECT_CONTAINS(every.output, " 0 failed");
    EXPECT_EQ(every.output.find("[rebalancing: 0 plans applied"), std::string::npos) << every.output;
    EXPECT_EQ(every.output.find(" 0 experts moved"), std::string::npos) << every.output;
  }
}

// `moe placement plan --min-replicas 2` plans (every expert on two ranks; on 2 nodes x 2
// ranks, on both nodes) that give the single-process tokens and logits; so do
// --min-replicas 2 at start-up (a planned start-up placement) and with rebalancing.
TEST(PlacementMpirun, MinReplicaPlansMatchOneProcess) {
  static const std::string dir = testing::make_temp_dir("min_replicas");
  const std::string load = dir + "/load.json";
  testing::write_file(load, R"({"load": [[50, 1, 2, 3, 4, 5, 6, 7], [1, 1, 1, 1, 1, 1, 1, 90],
                                         [0, 0, 9, 0, 0, 0, 0, 0], [5, 5, 5, 5, 5, 5, 5, 5]]})");
  const std::string plan2 = dir + "/plan2.json", plan4 = dir + "/plan4.json";
  auto p = run_command(moe_binary() + " placement plan --load " + load +
                       " --num-ranks 2 --slots-per-rank 8 --min-replicas 2 --out " + plan2);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  p = run_command(moe_binary() + " placement plan --load " + load +
                  " --num-ranks 4 --num-nodes 2 --slots-per-rank 5 --min-replicas 2 --out " + plan4);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  auto two = load_plan_file(plan2);
  auto four = load_plan_file(plan4);
  ASSERT_TRUE(two.ok() && four.ok());
  for (const LayerPlan& L : two->layers) {
    EXPECT_EQ(L.rank_slots, (std::vector<std::vector<int>>(2, {0, 1, 2, 3, 4, 5, 6, 7})));
  }
  for (const LayerPlan& L : four->layers) {
    for (int e = 0; e < 8; ++e) {
      std::set<int> nodes;
      for (int r = 0; r < 4; ++r) {
        const auto& s = L.rank_slots[static_cast<size_t>(r)];
        if (std::find(s.begin(), s.end(), e) != s.end()) nodes.insert(r / 2);
      }
      EXPECT_EQ(nodes.size(), 2u) << "layer " << L.layer << " expert " << e;
    }
  }
  const GenRun single = generate("", "");
  expect_same(single, generate(mpirun(2), "--ep 2 --placement " + plan2 + " --min-replicas 2"));
  expect_same(single, generate(mpirun(4), "--ep 4 --ranks-per-node 2 --placement " + plan4 + " --min-replicas 2"));
  expect_same(single, generate(mpirun(2), "--ep 2 --min-replicas 2"));
  // That start-up placement was planned (8 experts x 2 over 2 ranks: every rank holds all 8).
  const auto logged = run_command(mpirun(2) + moe_binary() +
                                  " --log-level info generate --ep 2 --min-replicas 2 --threads 1 --max-tokens 4 --prompt hi");
  ASSERT_EQ(logged.exit_code, 0) << logged.output;
  EXPECT_CONTAINS(logged.output, "start-up placement: every expert on >= 2 of 2 ranks, 8 slots per rank");
  const GenRun rebal = generate(mpirun(4), "--ep 4 --min-replicas 2 --rebalance-every 1 --rebalance-min-gain 0");
  ASSERT_EQ(rebal.exit_code, 0) << rebal.output;
  EXPECT_EQ(rebal.json["output_token_ids"], single.json["output_token_ids"]);
  EXPECT_CONTAINS(rebal.output, " 0 failed");
}

TEST(PlacementMpirun, MinReplicasErrors) {
  // A plan with one copy of each expert is refused, naming the layer and expert.
  const std::string one_copy = write_plan("one_copy.json", std::vector<std::vector<std::vector<int>>>(
                                                              4, {{7, 1, 3, 5}, {0, 6, 2, 4}}));
  auto r = generate(mpirun(2), "--ep 2 --min-replicas 2 --placement " + one_copy);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "layer 0, expert 0 has 1 replica(s), fewer than min_replicas 2");
  EXPECT_CONTAINS(r.output, "one_copy.json");
  r = generate(mpirun(2), "--ep 2 --min-replicas 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "--min-replicas 3 exceeds --ep 2");
  r = generate("", "--min-replicas 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "--min-replicas");
  EXPECT_CONTAINS(r.output, "mpirun");
  r = generate("", "--min-replicas 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "--min-replicas must be >= 1 (got 0)");
  // Too few slots for the floor: the planner's error, naming min_replicas.
  r = generate(mpirun(2), "--ep 2 --min-replicas 2 --slots-per-rank 6");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "min_replicas 2: not enough slots: need 16");
}

TEST(PlacementMpirun, BadPlanFilesAreClearErrorsOnEveryRank) {
  const std::string missing = write_plan("missing.json", std::vector<std::vector<std::vector<int>>>(4, {{0, 1, 2}, {4, 5, 6, 7}}));
  auto r = generate(mpirun(2), "--ep 2 --placement " + missing);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "expert 3");
  EXPECT_CONTAINS(r.output, "rank 1:");

  const std::string unknown = write_plan("unknown.json", std::vector<std::vector<std::vector<int>>>(4, {{0, 1, 2, 3, 9}, {4, 5, 6, 7}}));
  r = generate(mpirun(2), "--ep 2 --placement " + unknown);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "expert 9 does not exist");

  const std::string three = write_plan("three.json", std::vector<std::vector<std::vector<int>>>(4, {{0, 1, 2}, {3, 4, 5}, {6, 7}}));
  r = generate(mpirun(2), "--ep 2 --placement " + three);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "for 3 ranks, but 2 are running");

  r = generate(mpirun(2), "--ep 2 --placement /nonexistent/plan.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "/nonexistent/plan.json");

  r = generate("", "--placement " + three);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "mpirun");
}

}  // namespace
}  // namespace moe
