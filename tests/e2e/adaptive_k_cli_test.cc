// --adaptive-k / --min-k / --max-k / --adaptive-k-target and --overflow-policy
// adaptive_requeue on the command line: bad values and contradictions refused by name;
// `moe bench perplexity` against the torch reference's held-out NLL (tools/reference/
// make_golden.py: 3.5487 nats over BOS + the first 255 held-out tokens of Tiny
// Shakespeare for the shipped model) and its accounting of experts per token.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::CommandResult;
using testing::moe_binary;
using testing::run_command;

// The first 6000 characters of Tiny Shakespeare's held-out split (char offset 1059636;
// public domain), enough for 2 windows.
std::string heldout() { return testing::source_dir() + "/tests/data/text/tinyshakespeare_heldout_head.txt"; }

CommandResult generate(const std::string& args) { return run_command(moe_binary() + " generate --threads 1 " + args); }

void expect_error_exit(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 134) << "crashed: " << r.output;
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

TEST(AdaptiveKCliTest, BadValuesAndContradictions) {
  expect_error_exit(generate("--prompt hi --min-k 1"), {"--min-k applies to --adaptive-k"});
  expect_error_exit(generate("--prompt hi --max-k 1"), {"--max-k applies to --adaptive-k"});
  expect_error_exit(generate("--prompt hi --adaptive-k-target 0.5"), {"--adaptive-k-target applies to --adaptive-k"});
  expect_error_exit(generate("--prompt hi --adaptive-k --min-k 0"), {"--min-k must be >= 1"});
  expect_error_exit(generate("--prompt hi --adaptive-k --min-k 2 --max-k 1"), {"--min-k 2 exceeds --max-k 1"});
  expect_error_exit(generate("--prompt hi --adaptive-k --adaptive-k-target -1"), {"--adaptive-k-target", "positive"});
  // Against the model (top-2) at open.
  expect_error_exit(generate("--prompt hi --adaptive-k --max-k 3"), {"max_k 3", "experts per token (2)"});
  expect_error_exit(generate("--prompt hi --adaptive-k --min-k 3"), {"min_k 3 exceeds max_k 2"});
}

TEST(AdaptiveKCliTest, AdaptiveRequeueRuns) {
  const CommandResult r = generate("--prompt ROMEO: --max-tokens 2 --temperature 0 --adaptive-k --min-k 1 "
                                   "--overflow-policy adaptive_requeue --capacity-factor 1.0");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

nlohmann::json perplexity(const std::string& flags) {
  const std::string dir = testing::make_temp_dir("adaptive_k_cli");
  const CommandResult r = run_command(moe_binary() + " bench perplexity --threads 1 --text " +
                                      testing::sh_quote(heldout()) +
                                      " --offset 0 --windows 2 --batch 2 --json " + dir + "/p.json " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(testing::read_file(dir + "/p.json"));
}

TEST(AdaptiveKCliTest, PerplexityMatchesTheReferenceAndCountsExperts) {
  // The first window alone: BOS + 255 tokens, the reference's self-check (3.5487).
  const std::string dir = testing::make_temp_dir("adaptive_k_cli");
  const CommandResult one = run_command(moe_binary() + " bench perplexity --threads 1 --text " +
                                        testing::sh_quote(heldout()) +
                                        " --offset 0 --windows 1 --batch 1 --json " + dir + "/one.json");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto j1 = nlohmann::json::parse(testing::read_file(dir + "/one.json"));
  EXPECT_NEAR(j1["nll"].get<double>(), 3.5487, 2e-3);
  EXPECT_DOUBLE_EQ(j1["experts_per_token"].get<double>(), 2.0);

  const auto k2 = perplexity("");
  const auto k1 = perplexity("--adaptive-k --max-k 1");
  const auto ad = perplexity("--adaptive-k --adaptive-k-target 0.75");
  EXPECT_DOUBLE_EQ(k2["experts_per_token"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(k1["experts_per_token"].get<double>(), 1.0);
  EXPECT_EQ(k1["adaptive_dropped"].get<int64_t>(), 0);  // the max_k cap is not a load shed
  EXPECT_GT(ad["adaptive_dropped"].get<int64_t>(), 0);
  // 2 windows x 256 tokens x 4 MoE layers, two assignments each, less the shed ones.
  EXPECT_EQ(ad["assignments"].get<int64_t>(), 2 * 2 * 256 * 4 - ad["adaptive_dropped"].get<int64_t>());
  // Fewer experts cost quality: k = 1 is worse than the trained k = 2; adaptive k lies between.
  EXPECT_GT(k1["nll"].get<double>(), k2["nll"].get<double>());
  EXPECT_GE(ad["nll"].get<double>(), k2["nll"].get<double>() - 1e-3);
  EXPECT_LT(ad["nll"].get<double>(), k1["nll"].get<double>());
}

TEST(AdaptiveKCliTest, PerplexityBadFlags) {
  expect_error_exit(run_command(moe_binary() + " bench perplexity --text /nonexistent/t.txt"),
                    {"--text", "/nonexistent/t.txt"});
  const std::string text = testing::sh_quote(heldout());
  expect_error_exit(run_command(moe_binary() + " bench perplexity --text " + text + " --window 1"), {"--window"});
  expect_error_exit(run_command(moe_binary() + " bench perplexity --text " + text + " --offset 0 --window 4000"),
                    {"--window 4000 exceeds the model's context"});
  expect_error_exit(run_command(moe_binary() + " bench perplexity --text " + text + " --offset 5990"),
                    {"fewer than one window"});
  expect_error_exit(run_command(moe_binary() + " bench perplexity --text " + text + " --batch 0"), {"--batch"});
  expect_error_exit(run_command(moe_binary() + " bench perplexity --text " + text + " --offset 99999999"),
                    {"--offset", "past the end"});
}

}  // namespace
}  // namespace moe
