// The optional parts of the build (CMake MOE_WITH_ONEDNN, MOE_WITH_GLOO, MOE_WITH_RSVG):
// with the part built in, its feature runs; without it, the feature is refused by name,
// naming the build option, with a non-zero exit and no crash. This file is compiled in
// every configuration, with MOE_TEST_WITH_* telling it which one it is in.
#include <gtest/gtest.h>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

#ifndef MOE_TEST_WITH_ONEDNN
#error "MOE_TEST_WITH_ONEDNN must be defined (tests/CMakeLists.txt)"
#endif

namespace moe {
namespace {

using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::read_file;
using moe::testing::run_command;
using moe::testing::ScopedTempDir;
using moe::testing::sh_quote;
using moe::testing::write_file;

CommandResult moe_cmd(const std::string& args) { return run_command(moe_binary() + " " + args); }

bool cpu_has_avx512_bf16() {
  return read_file("/proc/cpuinfo").find(" avx512_bf16") != std::string::npos;
}

TEST(OptionalFeaturesCli, MatmulPrecisionMediumNeedsOneDnn) {
  const CommandResult r = moe_cmd("generate --prompt ROMEO: --max-tokens 2 --temperature 0 --threads 1 "
                                  "--matmul-precision medium");
  if (!MOE_TEST_WITH_ONEDNN) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_CONTAINS(r.output, "matmul_precision 'medium'");
    EXPECT_CONTAINS(r.output, "needs oneDNN");
    EXPECT_CONTAINS(r.output, "-DMOE_WITH_ONEDNN=OFF");
    return;
  }
  EXPECT_EQ(r.output.find("MOE_WITH_ONEDNN"), std::string::npos) << r.output;
  if (cpu_has_avx512_bf16()) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
  } else {  // refused for the CPU, not for the build
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_CONTAINS(r.output, "needs the avx512-bf16 kernels");
  }
}

TEST(OptionalFeaturesCli, CommBackendGlooNeedsGloo) {
  // Outside mpirun: a build with Gloo says how to launch it; one without says it has none.
  const CommandResult r = moe_cmd("generate --prompt ROMEO: --max-tokens 2 --comm-backend gloo --ep 2");
  EXPECT_NE(r.exit_code, 0) << r.output;
  if (!MOE_TEST_WITH_GLOO) {
    EXPECT_CONTAINS(r.output, "--comm-backend gloo: this build has no Gloo");
    EXPECT_CONTAINS(r.output, "-DMOE_WITH_GLOO=OFF");
  } else {
    EXPECT_EQ(r.output.find("MOE_WITH_GLOO"), std::string::npos) << r.output;
    EXPECT_CONTAINS(r.output, "run under mpirun");
  }
}

TEST(OptionalFeaturesCli, PngOutputNeedsLibrsvg) {
  ScopedTempDir dir("optional_png");
  const std::string stats = dir.file("stats.json");
  write_file(stats, R"({"layers": [{"layer": 0, "tokens_per_expert": [1, 3, 2, 2], "steps": 1}]})");
  const std::string png = dir.file("load.png");
  const CommandResult r = moe_cmd("stats plot --stats " + sh_quote(stats) + " --out " + sh_quote(png));
  if (!MOE_TEST_WITH_RSVG) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_CONTAINS(r.output, png);
    EXPECT_CONTAINS(r.output, "PNG output needs librsvg");
    EXPECT_CONTAINS(r.output, "-DMOE_WITH_RSVG=OFF");
    EXPECT_FALSE(std::filesystem::exists(png));
    // SVG output does not need it.
    const CommandResult svg = moe_cmd("stats plot --stats " + sh_quote(stats) + " --out " + sh_quote(dir.file("a.svg")));
    EXPECT_EQ(svg.exit_code, 0) << svg.output;
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string bytes = read_file(png);
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

}  // namespace
}  // namespace moe
