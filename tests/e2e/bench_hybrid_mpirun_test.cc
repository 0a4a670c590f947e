// `moe bench hybrid` under mpirun (4 ranks = 2 emulated nodes x TP 2): the fused hybrid
// MoE block over real MPI sub-communicators (MoeBlock::forward_fused, with and without
// the overlap) gives the same residual stream as AR + ep_moe_forward + AR (checked by
// tp_decoder_test against the single process), token counts 1 (shards of 1 and 0 rows)
// and 7 (uneven); and each bad flag is an error naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "contains_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::run_command;

CommandResult bench_hybrid(int np, const std::string& args) {
  return run_command("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " " + moe_binary() +
                     " bench hybrid --threads 1 --hidden 32 --moe-inter 16 --iters 1 " + args);
}

TEST(BenchHybridMpirunTest, FusedPathsMatchArThenA2aOverMpi) {
  const CommandResult r = bench_hybrid(4, "--tp 2 --ranks-per-node 2 --tokens 1,7 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.find("{\n");
  ASSERT_NE(brace, std::string::npos) << r.output;
  const nlohmann::json doc = nlohmann::json::parse(r.output.substr(brace));
  EXPECT_EQ(doc["tp"], 2);
  EXPECT_EQ(doc["ep"], 2);
  ASSERT_EQ(doc["rows"].size(), 2u);
  for (const auto& row : doc["rows"]) {
    EXPECT_LT(row["max_rel_diff"].get<double>(), 1e-5) << row.dump();
    EXPECT_GT(row["fused_us"].get<double>(), 0);
    EXPECT_GT(row["fused_overlap_us"].get<double>(), 0);
  }
}

void expect_error(const CommandResult& r, const std::string& needle) {
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << "exit code " << r.exit_code << ":\n" << r.output;
  EXPECT_CONTAINS(r.output, needle);
}

TEST(BenchHybridMpirunTest, BadFlagsAreErrorsNamingThem) {
  // Flags are checked before MPI is looked at: no mpirun needed for these.
  const std::string plain = moe_binary() + " bench hybrid --hidden 32 --moe-inter 16 ";
  expect_error(run_command(plain + "--tp 3"), "--moe-inter 16 is not divisible by --tp 3");
  expect_error(run_command(plain + "--tp 1"), "--tp must be >= 2");
  expect_error(run_command(plain + "--tokens 0"), "--tokens values must be in [1, 65536]");
  expect_error(run_command(plain + "--format csv"), "--format must be table or json");
  expect_error(bench_hybrid(2, "--tp 2 --tokens 4"), "--tp 2 must divide the 2 mpirun ranks into >= 2 TP groups");
  // A TP group that spans emulated nodes.
  expect_error(bench_hybrid(4, "--tp 2 --ranks-per-node 1 --tokens 4"), "a TP group must lie inside one node");
  // Without mpirun: how to start it.
  expect_error(run_command(plain + "--tokens 4"), "runs under mpirun");
}

}  // namespace
}  // namespace moe
