// The `moe` binary on an unknown subcommand, at any level: exit 2 (bad usage) with an
// error naming the word, the level it was read at and that level's known subcommands,
// even beside --help. --help on a known level still prints its help and exits 0.
#include <gtest/gtest.h>

#include <string>

#include "contains_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::run_command;

CommandResult moe_cmd(const std::string& args) { return run_command(moe_binary() + " " + args); }

void expect_unknown(const std::string& args, const std::string& message) {
  SCOPED_TRACE("moe " + args);
  const CommandResult r = moe_cmd(args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "error: " + message);
  EXPECT_EQ(r.output.find("Usage:"), std::string::npos) << "printed a help text:\n" << r.output;
}

TEST(SubcommandCliTest, UnknownTopLevelSubcommand) {
  expect_unknown("gateway",
                 "moe: unknown subcommand 'gateway' (known: generate, serve, bench, placement, stats, trace, ckpt, "
                 "info, plan, config, doctor, deploy; see 'moe --help')");
}

TEST(SubcommandCliTest, UnknownTopLevelSubcommandWithHelp) {
  expect_unknown("gateway --help", "moe: unknown subcommand 'gateway' (known: generate, serve, bench,");
  expect_unknown("--help gateway", "moe: unknown subcommand 'gateway' (known: generate, serve, bench,");
  expect_unknown("--log-level info gateway", "moe: unknown subcommand 'gateway'");
}

TEST(SubcommandCliTest, UnknownNestedSubcommand) {
  expect_unknown("bench nosuch",
                 "moe bench: unknown subcommand 'nosuch' (known: generate, batch, a2a, moe-layer, hybrid, capacity, "
                 "perplexity, serve, ckpt, chaos, fp8, tokenizer; see 'moe bench --help')");
  expect_unknown("bench nosuch --help", "moe bench: unknown subcommand 'nosuch'");
  expect_unknown("ckpt nosuch",
                 "moe ckpt: unknown subcommand 'nosuch' (known: convert, save, restore, verify, info, gc; see "
                 "'moe ckpt --help')");
  expect_unknown("stats nosuch --help", "moe stats: unknown subcommand 'nosuch' (known: show, plot;");
  expect_unknown("plan nosuch", "moe plan: unknown subcommand 'nosuch' (known: calibrate;");
}

TEST(SubcommandCliTest, HelpStillExitsZero) {
  for (const std::string args : {"--help", "bench --help", "ckpt --help", "generate --help", "bench generate --help",
                                 "ckpt convert --help", "plan --help"}) {
    SCOPED_TRACE("moe " + args);
    const CommandResult r = moe_cmd(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "Usage:");
  }
}

// An unknown flag is still CLI11's own error (not taken for a subcommand).
TEST(SubcommandCliTest, UnknownFlagIsNotASubcommand) {
  const CommandResult r = moe_cmd("bench --bogus nosuch");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--bogus");
  EXPECT_EQ(r.output.find("unknown subcommand"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace moe
