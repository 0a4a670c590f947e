// `moe plan`: the ranked JSON and table on real configs and the shipped profiles, and each
// bad input (missing profile or tier, no workload, a model that fits nowhere) exits 1
// naming the flag or field, never crashes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::run_command;
using moe::testing::ScopedTempDir;
using moe::testing::sh_quote;
using nlohmann::json;

std::string config(const std::string& name) { return moe::testing::source_dir() + "/tests/data/configs/" + name; }
std::string profile(const std::string& name) { return moe::testing::source_dir() + "/profiles/" + name + ".json"; }

CommandResult plan(const std::string& args) { return run_command(moe_binary() + " plan " + args + " 2>&1"); }

void expect_error(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

TEST(PlanCliTest, DeepSeekV3On16x8H100Json) {
  const CommandResult r = plan("--model " + sh_quote(config("deepseek-v3.json")) + " --profile " +
                               sh_quote(profile("h100_sxm_8gpu")) +
                               " --nodes 16 --devices-per-node 8 --batch 1024 --input-len 1000 --output-len 1000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["objective"], "throughput");
  ASSERT_GE(j["feasible"].size(), 5u);
  double prev = 1e300;
  for (const auto& s : j["feasible"]) {
    const double ttft = s["ttft_ms"], tpot = s["tpot_ms"], tps = s["throughput_tok_s"];
    EXPECT_GT(ttft, 0);
    EXPECT_GT(tpot, 0);
    // Throughput is batch x output over (TTFT + output x TPOT), and the ranking follows it.
    EXPECT_NEAR(tps, 1024.0 * 1000 / ((ttft + 1000 * tpot) / 1e3), tps * 1e-9);
    EXPECT_LE(tps, prev);
    prev = tps;
    EXPECT_LE(s["memory_gb"]["total"].get<double>(), 85.9 + 1e-9);  // 80 GiB
    EXPECT_NEAR(s["decode"]["total_ms"].get<double>(), tpot, 1e-9);
  }
  bool spans = false;
  for (const auto& s : j["infeasible"]) {
    spans |= s["reason"].get<std::string>().find("spans 2 nodes") != std::string::npos;
  }
  EXPECT_TRUE(spans) << j["infeasible"].dump();
}

TEST(PlanCliTest, TableListsRankedAndInfeasibleStrategies) {
  const CommandResult r = plan("--model " + sh_quote(config("mixtral-8x7b.json")) + " --profile " +
                               sh_quote(profile("a100_sxm_8gpu")) +
                               " --nodes 2 --devices-per-node 8 --batch 64 --input-len 512 --output-len 128");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "ranked by throughput");
  EXPECT_CONTAINS(r.output, "TTFT ms");
  EXPECT_CONTAINS(r.output, "infeasible:");
  // Mixtral has 8 experts: EP 16 cannot hold them.
  EXPECT_CONTAINS(r.output, "routed experts 8 not divisible by EP 16");
  // 8 KV heads: attention TP 16 refused.
  EXPECT_CONTAINS(r.output, "num_key_value_heads 8 not divisible by attention TP 16");
}

TEST(PlanCliTest, ModelThatFitsNowhereSaysWhatMemoryIsNeeded) {
  const CommandResult r = plan("--model " + sh_quote(config("deepseek-v3.json")) + " --profile " +
                               sh_quote(profile("h100_sxm_8gpu")) + " --nodes 1 --batch 8 --input-len 100 --output-len 10");
  expect_error(r, {"no strategy fits the model on 1 x 8 devices of 85.9 GB", "the smallest footprint is", "needs"});
}

TEST(PlanCliTest, BadInputNamesTheFlagOrField) {
  const std::string model = " --model " + sh_quote(config("mixtral-8x7b.json"));
  const std::string prof = " --profile " + sh_quote(profile("h100_sxm_8gpu"));
  expect_error(plan(model + " --batch 1 --input-len 1 --output-len 1"), {"--profile is required"});
  expect_error(plan(prof + " --batch 1 --input-len 1 --output-len 1"), {"--model is required"});
  expect_error(plan(model + prof + " --input-len 1 --output-len 1"), {"--batch B", "--request-rate R"});
  expect_error(plan(model + prof + " --batch 1 --output-len 1"), {"--input-len must be >= 1"});
  expect_error(plan(model + prof + " --nodes 0 --batch 1 --input-len 1 --output-len 1"), {"--nodes must be >= 1"});
  expect_error(plan(" --model /nonexistent/config.json" + prof + " --batch 1 --input-len 1 --output-len 1"),
               {"/nonexistent/config.json"});
  expect_error(plan(model + " --profile /nonexistent/p.json --batch 1 --input-len 1 --output-len 1"),
               {"--profile /nonexistent/p.json: cannot open"});
  // A profile without its inter-node tier.
  ScopedTempDir dir("plan_cli");
  json p = json::parse(moe::testing::read_file(profile("h100_sxm_8gpu")));
  p["tiers"].erase("inter_node");
  const std::string path = dir.path() + "/p.json";
  moe::testing::write_file(path, p.dump());
  expect_error(plan(model + " --profile " + sh_quote(path) + " --batch 1 --input-len 1 --output-len 1"),
               {"p.json: tiers.inter_node: missing"});
}

}  // namespace
}  // namespace moe
