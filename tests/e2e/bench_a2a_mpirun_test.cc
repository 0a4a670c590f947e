// `moe bench a2a` flags under mpirun (named *_mpirun_test so the sanitizer build runs it
// without LeakSanitizer: Open MPI's allocations outlive MPI_Finalize). Experts per token
// is --num-topk there; the old spelling --top-k (which means sampling top-k in
// `moe generate`) stays a hidden alias.
#include <gtest/gtest.h>

#include <string>

#include "contains_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::run_command;

// An error exit: 1 (error) or 2 (usage), not a crash.
void expect_error_exit(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << "exit code " << r.exit_code << ", output:\n" << r.output;
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

CommandResult bench_a2a(const std::string& args) {
  return run_command("mpirun --allow-run-as-root --oversubscribe -np 1 " + moe_binary() +
                     " bench a2a --threads 1 --hidden 8 --tokens 4 --routing uniform --experts 4 --repeats 1"
                     " --warmup 0 --no-overlap --no-bf16 --algo-hidden 0 " + args);
}

TEST(CliBenchA2aTest, NumTopkAndItsOldSpellingTopKSetExpertsPerToken) {
  for (const char* flag : {"--num-topk", "--top-k"}) {
    auto r = bench_a2a(std::string(flag) + " 3");
    EXPECT_EQ(r.exit_code, 0) << flag << ":\n" << r.output;
    EXPECT_CONTAINS(r.output, "4 experts top-3");
  }
}

TEST(CliBenchA2aTest, BadNumTopkNamesTheFlagWhicheverSpellingGaveIt) {
  for (const char* flag : {"--num-topk", "--top-k"}) {
    expect_error_exit(bench_a2a(std::string(flag) + " 0"), {"--num-topk must be >= 1 (got 0)"});
    expect_error_exit(bench_a2a(std::string(flag) + " 5"), {"--num-topk 5 exceeds --experts 4"});
  }
}

TEST(CliBenchA2aTest, BothSpellingsAtOnceAreAUsageError) {
  expect_error_exit(bench_a2a("--num-topk 2 --top-k 3"), {"--top-k", "--num-topk"});
}

// Overlap on 4 ranks as 2 nodes of 2: a table for the flat and one for the hierarchical
// exchange, each row with the engine's ratio in [0, 100]%.
TEST(CliBenchA2aTest, OverlapTablesForFlatAndHierarchical) {
  auto r = run_command("mpirun --allow-run-as-root --oversubscribe -np 4 " + moe_binary() +
                       " bench a2a --threads 1 --hidden 32 --tokens 16 --routing uniform --experts 8 --num-topk 2"
                       " --repeats 1 --warmup 0 --no-bf16 --algo-hidden 0 --ranks-per-node 2"
                       " --overlap-micro-batches 2 --overlap-max-intermediate 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* mode : {"overlap (flat f32; 2 micro-batches)", "overlap (hierarchical f32; 2 micro-batches)"}) {
    const size_t at = r.output.find(mode);
    ASSERT_NE(at, std::string::npos) << mode << "\n" << r.output;
    // The table's one row: tokens | inter ffn | wait off, wait on, hidden, ratio | ...
    const size_t row = r.output.find("\n      16 |", at);
    ASSERT_NE(row, std::string::npos) << r.output;
    const std::string line = r.output.substr(row + 1, r.output.find('\n', row + 1) - row - 1);
    const size_t pct = line.rfind('%');  // the ratio column is the last percentage
    ASSERT_NE(pct, std::string::npos) << line;
    size_t start = line.find_last_of(' ', pct);
    const double ratio = std::stod(line.substr(start + 1, pct - start - 1));
    EXPECT_GE(ratio, 0.0) << line;
    EXPECT_LE(ratio, 100.0) << line;
  }
}

}  // namespace
}  // namespace moe
