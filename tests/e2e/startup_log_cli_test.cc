// `moe --log-level info generate` prints Engine::open's start-up phases on one line
// (docs: each phase's time, then the total); at the default level (warn) it does not.
#include <gtest/gtest.h>

#include <string>

#include "contains_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::run_command;

TEST(StartupLogCliTest, InfoPrintsThePhases) {
  const std::string generate = " generate --model " + moe::testing::sh_quote(moe::testing::tiny_model_dir()) +
                               " --prompt hi --max-tokens 1 --temperature 0 --hugepages on";
  const auto r = run_command(moe::testing::moe_binary() + " --log-level info" + generate);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "] start-up: open files ");
  for (const char* phase : {", config ", ", bind weights ", ", tokenizer ", ", weight scan ", ", huge-page copy ",
                            ", decoder ", ", total "}) {
    EXPECT_CONTAINS(r.output, phase);
  }
  const auto quiet = run_command(moe::testing::moe_binary() + generate);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("start-up:"), std::string::npos) << quiet.output;
}

}  // namespace
}  // namespace moe
