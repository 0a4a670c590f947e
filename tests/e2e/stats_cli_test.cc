// `moe stats show|plot`: a hand-made statistics file, SGLang's DeepSeek-V3 expert
// distribution (when ../shared next to the source tree holds it; skipped loudly otherwise), and bad input: exit 1 (error) or 2 (usage),
// never a crash, with a message naming the file, field or flag.
#include <gtest/gtest.h>

#include <filesystem>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::read_file;
using moe::testing::run_command;
using moe::testing::ScopedTempDir;
using moe::testing::sh_quote;
using moe::testing::write_file;

const std::string kSglangFile =
    moe::testing::shared_data_dir() + "/routing/sglang_deepseek_v3_ep_statistics/decode_in1000out1000.json";

CommandResult moe_cmd(const std::string& args) { return run_command(moe_binary() + " " + args); }

void expect_error_exit(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << "exit code " << r.exit_code << ", output:\n" << r.output;
  // Our own errors say "error: ..."; CLI11's usage errors (exit 2) name the flag without the prefix.
  if (r.exit_code == 1) {
    EXPECT_CONTAINS(r.output, "error: ");
  }
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

size_t count_cells(const std::string& svg) {
  size_t n = 0;
  for (size_t i = svg.find("<rect"); i != std::string::npos; i = svg.find("<rect", i + 1)) {
    const size_t end = svg.find('>', i);
    if (svg.substr(i, end - i).find(" fill=\"#") != std::string::npos) ++n;
  }
  return n;
}

class StatsCliTest : public ::testing::Test {
 protected:
  StatsCliTest() : dir_("stats_cli") {}
  std::string write(const std::string& name, const std::string& text) {
    write_file(dir_.file(name), text);
    return dir_.file(name);
  }
  std::string hand_made() {
    return write("hand.json", R"({"layers": [
      {"layer": 1, "tokens_per_expert": [10, 30, 20, 20], "ema": [1, 3, 2, 2], "dropped": 4, "rerouted": 2, "steps": 5,
       "degraded_tokens": 7, "degraded_per_expert": [0, 0, 0, 7]},
      {"layer": 3, "tokens_per_expert": [0, 0, 80, 0], "ema": [0, 0, 8, 0], "steps": 5}],
      "num_experts": 4, "ema_decay": 0.9})");
  }
  ScopedTempDir dir_;
};

TEST_F(StatsCliTest, PlotHandMadeFile) {
  const std::string in = hand_made();
  const std::string out = dir_.file("h.svg");
  for (const std::string& flags :
       {std::string(""), std::string("--value ema --normalize layer --scale log --title 'A & B'")}) {
    auto r = moe_cmd("stats plot --stats " + sh_quote(in) + " --out " + sh_quote(out) + " " + flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "wrote " + out + " (2 MoE layers x 4 experts)");
    const std::string svg = read_file(out);
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
    EXPECT_CONTAINS(svg, "</svg>");
    EXPECT_EQ(count_cells(svg), 8u);
    EXPECT_CONTAINS(svg, ">1.50</text>");  // layer 1: max 30 / mean 20
    EXPECT_CONTAINS(svg, ">4.00</text>");  // layer 3: all on one expert
    if (!flags.empty()) {
      EXPECT_CONTAINS(svg, "A &amp; B");
      EXPECT_CONTAINS(svg, "load / layer mean (log scale)");
    }
  }
}

TEST_F(StatsCliTest, ShowHandMadeFile) {
  auto r = moe_cmd("stats show --stats " + sh_quote(hand_made()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "2 MoE layers x 4 experts");
  // layer, steps, tokens, max/mean, hottest, hottest tokens, dropped, rerouted, degraded
  EXPECT_CONTAINS(r.output,
                  "     1        5             80      1.50        1             30          4          2          7");
  EXPECT_CONTAINS(r.output,
                  "     3        5             80      4.00        2             80          0          0          0");
  EXPECT_CONTAINS(r.output, "median 2.75, max 4.00 (layer 3)");
}

TEST_F(StatsCliTest, SglangDeepSeekV3Statistics) {
  MOE_SKIP_IF_MISSING(kSglangFile);
  const std::string out = dir_.file("dsv3.svg");
  auto r = moe_cmd("stats plot --stats " + sh_quote(kSglangFile) + " --out " + sh_quote(out) + " --normalize layer");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "skipping 3 all-zero layers (dense layers, no MoE block): 0, 1, 2");
  EXPECT_CONTAINS(r.output, "(58 MoE layers x 256 experts)");
  const std::string svg = read_file(out);
  EXPECT_EQ(count_cells(svg), 58u * 256u);
  EXPECT_CONTAINS(svg, ">10.28</text>");  // layer 30, the most imbalanced (data README: max about 13.7 over all files)
  EXPECT_CONTAINS(svg, "load / layer mean");

  r = moe_cmd("stats show --stats " + sh_quote(kSglangFile));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "58 MoE layers x 256 experts");
  EXPECT_CONTAINS(r.output, "147308544");  // tokens x 8 per layer (data README)
  EXPECT_CONTAINS(r.output, "max 10.28 (layer 30)");

  // The SGLang file holds totals only.
  r = moe_cmd("stats plot --stats " + sh_quote(kSglangFile) + " --out " + sh_quote(out) + " --value ema");
  expect_error_exit(r, {"--value ema", kSglangFile, "no 'ema'"});
}

TEST_F(StatsCliTest, MissingFile) {
  const std::string path = dir_.file("nope.json");
  auto r = moe_cmd("stats show --stats " + sh_quote(path));
  expect_error_exit(r, {path, "not found"});
  EXPECT_EQ(r.exit_code, 1);
  r = moe_cmd("stats plot --stats " + sh_quote(path) + " --out " + sh_quote(dir_.file("x.svg")));
  expect_error_exit(r, {path, "not found"});
  EXPECT_FALSE(std::filesystem::exists(dir_.file("x.svg")));
}

TEST_F(StatsCliTest, DirectoryInsteadOfFile) {
  expect_error_exit(moe_cmd("stats show --stats " + sh_quote(dir_.path())), {dir_.path(), "directory"});
}

TEST_F(StatsCliTest, MalformedJson) {
  const std::string path = write("bad.json", "{\"layers\": [ {\"tokens_per_expert\": [1, 2");
  auto r = moe_cmd("stats show --stats " + sh_quote(path));
  expect_error_exit(r, {path, "not valid JSON"});
  EXPECT_EQ(r.exit_code, 1);
}

TEST_F(StatsCliTest, WrongTypes) {
  std::string path = write("types.json", R"({"layers": [{"tokens_per_expert": "lots"}]})");
  expect_error_exit(moe_cmd("stats show --stats " + sh_quote(path)), {path, "layers[0].tokens_per_expert"});
  path = write("neg.json", R"({"layers": [{"tokens_per_expert": [1, -4]}]})");
  expect_error_exit(moe_cmd("stats plot --stats " + sh_quote(path) + " --out " + sh_quote(dir_.file("n.svg"))),
                    {path, "layers[0].tokens_per_expert[1]", "-4"});
  path = write("nolayers.json", R"({"experts": 3})");
  expect_error_exit(moe_cmd("stats show --stats " + sh_quote(path)), {path, "'layers' is missing"});
  path = write("sglang_str.json", R"({"logical_count": [[1, 2], ["3", 4]]})");
  expect_error_exit(moe_cmd("stats show --stats " + sh_quote(path)), {path, "logical_count[1][0]"});
}

TEST_F(StatsCliTest, RaggedRows) {
  std::string path =
      write("ragged.json", R"({"layers": [{"tokens_per_expert": [1, 2, 3]}, {"tokens_per_expert": [1]}]})");
  expect_error_exit(moe_cmd("stats show --stats " + sh_quote(path)),
                    {path, "layers[1].tokens_per_expert has 1 entries"});
  path = write("ragged_sglang.json", R"({"logical_count": [[1, 2, 3], [1, 2]]})");
  expect_error_exit(moe_cmd("stats plot --stats " + sh_quote(path) + " --out " + sh_quote(dir_.file("r.svg"))),
                    {path, "logical_count[1] has 2 entries"});
}

TEST_F(StatsCliTest, EmaOfAFileWithoutEma) {
  const std::string path = write("noema.json", R"({"layers": [{"tokens_per_expert": [1, 2]}]})");
  expect_error_exit(
      moe_cmd("stats plot --value ema --stats " + sh_quote(path) + " --out " + sh_quote(dir_.file("e.svg"))),
      {"--value ema", path, "no 'ema'"});
}

TEST_F(StatsCliTest, BadFlags) {
  const std::string in = hand_made();
  const std::string out = " --out " + sh_quote(dir_.file("f.svg"));
  auto r = moe_cmd("stats plot --stats " + sh_quote(in) + out + " --value median");
  expect_error_exit(r, {"--value", "median"});
  EXPECT_EQ(r.exit_code, 2);
  r = moe_cmd("stats plot --stats " + sh_quote(in) + out + " --normalize row");
  expect_error_exit(r, {"--normalize", "row"});
  EXPECT_EQ(r.exit_code, 2);
  r = moe_cmd("stats plot --stats " + sh_quote(in) + out + " --scale sqrt");
  expect_error_exit(r, {"--scale", "sqrt"});
  r = moe_cmd("stats plot --stats " + sh_quote(in));
  expect_error_exit(r, {"--out", "required"});
  EXPECT_EQ(r.exit_code, 2);
  r = moe_cmd("stats show");
  expect_error_exit(r, {"--stats", "required"});
  EXPECT_EQ(r.exit_code, 2);
  r = moe_cmd("stats");
  expect_error_exit(r, {"subcommand"});
  EXPECT_EQ(r.exit_code, 2);
  r = moe_cmd("stats plot --stats '' --out " + sh_quote(dir_.file("f.svg")));
  expect_error_exit(r, {"--stats is empty"});
  r = moe_cmd("stats plot --stats " + sh_quote(in) + " --out ''");
  expect_error_exit(r, {"--out is empty"});
}

TEST_F(StatsCliTest, UnwritableOutput) {
  const std::string out = dir_.file("no/such/dir/h.svg");
  auto r = moe_cmd("stats plot --stats " + sh_quote(hand_made()) + " --out " + sh_quote(out));
  expect_error_exit(r, {"--out", out});
  EXPECT_EQ(r.exit_code, 1);
}

TEST_F(StatsCliTest, Help) {
  for (const char* cmd : {"stats --help", "stats plot --help", "stats show --help"}) {
    auto r = moe_cmd(cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "Usage:");
  }
  auto r = moe_cmd("stats plot --help");
  for (const char* flag : {"--stats", "--out", "--value", "--normalize", "--scale", "--title", "logical_count"}) {
    EXPECT_CONTAINS(r.output, flag);
  }
  EXPECT_CONTAINS(moe_cmd("--help").output, "stats");
}

}  // namespace
}  // namespace moe
