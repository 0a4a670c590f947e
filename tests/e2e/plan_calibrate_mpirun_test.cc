// `moe plan calibrate` under mpirun (4 ranks as 2 emulated nodes of 2, --quick): writes a
// profile that `moe plan` loads, with positive fits; refuses to run without mpirun or
// without two nodes, naming what is missing.
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

std::string mpirun(int np) { return "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " "; }

TEST(PlanCalibrateMpirunTest, WritesAProfileMoePlanLoads) {
  ScopedTempDir dir("plan_calibrate");
  const std::string out = dir.path() + "/profile.json";
  const CommandResult r = run_command(mpirun(4) + moe_binary() + " plan calibrate --quick --ranks-per-node 2 --comm-timeout 20 --out " +
                                      sh_quote(out) + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "calibrate inter_node alltoall");
  const json p = json::parse(moe::testing::read_file(out));
  EXPECT_EQ(p["devices_per_node"], 2);
  for (const char* tier : {"intra_node", "inter_node"}) {
    for (const char* prim : {"allreduce", "reduce_scatter", "allgather", "alltoall", "p2p"}) {
      EXPECT_GE(p["tiers"][tier][prim]["alpha"].get<double>(), 0.0) << tier << " " << prim;
      EXPECT_GT(p["tiers"][tier][prim]["beta"].get<double>(), 0.0) << tier << " " << prim;
    }
  }
  EXPECT_GT(p["device"]["peak_flops"]["bf16"].get<double>(), 1e6);
  EXPECT_GT(p["device"]["memory_bandwidth"].get<double>(), 1e6);
  const CommandResult plan = run_command(moe_binary() + " plan --model " +
                                         sh_quote(moe::testing::tiny_model_dir()) + " --profile " + sh_quote(out) +
                                         " --nodes 2 --batch 4 --input-len 16 --output-len 8 2>&1");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_CONTAINS(plan.output, "MoE EP4");
}

TEST(PlanCalibrateMpirunTest, FitsEfficienciesToAModel) {
  ScopedTempDir dir("plan_calibrate_model");
  const std::string out = dir.path() + "/profile.json";
  const CommandResult r = run_command(mpirun(4) + moe_binary() + " plan calibrate --quick --ranks-per-node 2 --comm-timeout 30 --model " +
                                      sh_quote(moe::testing::tiny_model_dir()) +
                                      " --prompt-tokens 8 --gen-tokens 4 --out " + sh_quote(out) + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "calibrate efficiencies on");
  const json p = json::parse(moe::testing::read_file(out));
  for (const char* k : {"compute_efficiency", "memory_efficiency"}) {
    const double e = p["device"][k].get<double>();
    EXPECT_GE(e, 0.01) << k;
    EXPECT_LE(e, 1.0) << k;
  }
  EXPECT_CONTAINS(p["provenance"].get<std::string>(), "efficiencies fitted to");
  // A model that is not there: the error names the flag and the path.
  const CommandResult bad = run_command(mpirun(4) + moe_binary() +
                                        " plan calibrate --quick --ranks-per-node 2 --comm-timeout 30 --model /nonexistent/m --out " +
                                        sh_quote(dir.path() + "/x.json") + " 2>&1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_CONTAINS(bad.output, "--model /nonexistent/m");
}

TEST(PlanCalibrateMpirunTest, RepeatsBelowOneIsRefusedByName) {
  const CommandResult r = run_command(moe_binary() + " plan calibrate --repeats 0 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "--repeats must be >= 1 (got 0)");
}

TEST(PlanCalibrateMpirunTest, NeedsMpirunAndTwoNodes) {
  CommandResult r = run_command(moe_binary() + " plan calibrate --quick 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "runs under mpirun");
  r = run_command(mpirun(2) + moe_binary() + " plan calibrate --quick --ranks-per-node 2 --comm-timeout 10 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "inter_node tier: needs >= 2 nodes");
}

}  // namespace
}  // namespace moe
