// `moe` with FP8 weights: --fp8 native|dequant on generate (a bad value is refused by
// name), and `moe bench fp8` on a small shape.
#include <gtest/gtest.h>

#include "contains_util.h"
#include "fp8_model_util.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::moe_binary;
using testing::run_command;
using testing::sh_quote;

TEST(Fp8CliTest, GenerateNativeAndDequantAndABadMode) {
  testing::ScopedTempDir tmp("fp8_cli");
  testing::make_fp8_model(testing::tiny_model_dir(), tmp.file("fp8"), 48, 80);
  const std::string base = moe_binary() + " generate --model " + sh_quote(tmp.file("fp8")) +
                           " --prompt 'ROMEO:' --max-tokens 8 --temperature 0 --threads 1";
  const auto native = run_command(base + " --fp8 native");
  ASSERT_EQ(native.exit_code, 0) << native.output;
  const auto dequant = run_command(base + " --fp8 dequant");
  ASSERT_EQ(dequant.exit_code, 0) << dequant.output;
  EXPECT_FALSE(native.output.empty());
  const auto bad = run_command(base + " --fp8 fast");
  EXPECT_TRUE(bad.exit_code == 1 || bad.exit_code == 2) << bad.output;
  EXPECT_CONTAINS(bad.output, "--fp8");
  EXPECT_CONTAINS(bad.output, "fast");
}

// --fp8 native on a model with no FP8 weights used to be accepted and ignored.
TEST(Fp8CliTest, Fp8NativeRefusedWithoutFp8Weights) {
  const auto r = run_command(moe_binary() + " generate --model " + sh_quote(testing::tiny_model_dir()) +
                             " --prompt 'ROMEO:' --max-tokens 2 --threads 1 --fp8 native");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "--fp8 native");
  EXPECT_CONTAINS(r.output, "quantization_config");
}

TEST(Fp8CliTest, BenchFp8ReportsBothModes) {
  const auto r = run_command(moe_binary() + " bench fp8 --shapes 96x200 --threads 1 --repeats 1 --pool-mb 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "96x200");
  EXPECT_CONTAINS(r.output, "fp8");
  EXPECT_CONTAINS(r.output, "bf16/fp8");
  const auto bad = run_command(moe_binary() + " bench fp8 --shapes 96by200");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_CONTAINS(bad.output, "96by200");
}

}  // namespace
}  // namespace moe
