// The `moe` binary on bad flags and bad model directories: a non-zero exit (1 = error,
// 2 = bad usage; never a signal) and a message naming the flag, file or field. Plus the
// happy path of --format json and --logits-out against the golden data.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "contains_util.h"
#include "moe/engine.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using moe::testing::CommandResult;
using moe::testing::golden_dir;
using moe::testing::moe_binary;
using moe::testing::read_f32;
using moe::testing::read_file;
using moe::testing::run_command;
using moe::testing::ScopedTempDir;
using moe::testing::sh_quote;
using moe::testing::tiny_model_dir;

// `moe <args>` with stdout and stderr together.
CommandResult moe_cmd(const std::string& args) { return run_command(moe_binary() + " " + args); }

// `moe generate --model <tiny> <args>`.
CommandResult generate(const std::string& args) {
  return moe_cmd("generate --model " + sh_quote(tiny_model_dir()) + " " + args);
}

// An error exit: 1 (error) or 2 (usage), not a crash (a signal gives -1 from run_command,
// a shell-reported one 128+N).
void expect_error_exit(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << "exit code " << r.exit_code << ", output:\n" << r.output;
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

TEST(CliErrorsTest, MissingModelDir) {
  const std::string dir = "/nonexistent/moe-model-dir";
  auto r = moe_cmd("generate --model " + dir + " --prompt hi");
  expect_error_exit(r, {dir, "not found"});
  EXPECT_EQ(r.exit_code, 1);
}

TEST(CliErrorsTest, UnknownModelType) {
  ScopedTempDir dir("cli_foo");
  moe::testing::copy_model_dir(moe::testing::sharded_model_dir(), dir.path());
  json config = moe::testing::read_json(dir.file("config.json"));
  config["model_type"] = "foo";
  moe::testing::write_json(dir.file("config.json"), config);
  auto r = moe_cmd("generate --model " + sh_quote(dir.path()) + " --prompt hi");
  expect_error_exit(r, {"unknown model_type 'foo'", dir.file("config.json")});
}

TEST(CliErrorsTest, MissingTokenizer) {
  ScopedTempDir dir("cli_notok");
  moe::testing::copy_model_dir(moe::testing::sharded_model_dir(), dir.path());
  std::filesystem::remove(dir.file("tokenizer.model"));
  auto r = moe_cmd("generate --model " + sh_quote(dir.path()) + " --prompt hi");
  expect_error_exit(r, {dir.path() + ": no tokenizer", "tokenizer.json", "tokenizer.model"});
}

TEST(CliErrorsTest, MissingConfig) {
  ScopedTempDir dir("cli_noconfig");
  moe::testing::copy_model_dir(moe::testing::sharded_model_dir(), dir.path());
  std::filesystem::remove(dir.file("config.json"));
  auto r = moe_cmd("generate --model " + sh_quote(dir.path()) + " --prompt hi");
  expect_error_exit(r, {dir.file("config.json")});
}

// --threads 100000 used to crash (a stack overflow in the OpenMP runtime). The
// limit is 4 x the machine's hardware threads, named in the message.
TEST(CliErrorsTest, AbsurdThreadCount) {
  const unsigned hw = std::thread::hardware_concurrency();
  const std::string limit = std::to_string(4 * (hw > 0 ? hw : 64));
  expect_error_exit(generate("--prompt hi --threads 100000"), {"--threads 100000", "(" + limit + ")"});
}

TEST(CliErrorsTest, EmptyPrompt) { expect_error_exit(generate("--prompt ''"), {"--prompt", "empty"}); }

TEST(CliErrorsTest, MissingPrompt) {
  auto r = generate("--max-tokens 4");
  expect_error_exit(r, {"--prompt", "required"});
  EXPECT_EQ(r.exit_code, 2);
}

// An unknown flag is named, not the required --prompt it displaced.
TEST(CliErrorsTest, UnknownFlagIsNamedBeforeAMissingRequiredOne) {
  auto r = generate("--bogus");
  expect_error_exit(r, {"not expected: --bogus"});
  EXPECT_EQ(r.output.find("--prompt is required"), std::string::npos) << r.output;
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CliErrorsTest, NegativeMaxTokens) {
  expect_error_exit(generate("--prompt hi --max-tokens -5"), {"--max-tokens", "-5"});
}

TEST(CliErrorsTest, MaxTokensBeyondContext) {
  expect_error_exit(generate("--prompt hi --max-tokens 100000000"), {"--max-tokens", "100000000", "context of 512"});
}

TEST(CliErrorsTest, MaxTokensNotANumber) {
  auto r = generate("--prompt hi --max-tokens abc");
  expect_error_exit(r, {"--max-tokens", "abc"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CliErrorsTest, MaxTokensOverflowsInt) {
  auto r = generate("--prompt hi --max-tokens 99999999999");
  expect_error_exit(r, {"--max-tokens", "99999999999"});
}

TEST(CliErrorsTest, UnknownFormat) {
  auto r = generate("--prompt hi --format xml");
  expect_error_exit(r, {"--format", "xml"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CliErrorsTest, NegativeTemperature) {
  expect_error_exit(generate("--prompt hi --temperature -1"), {"--temperature", "-1"});
}

TEST(CliErrorsTest, NanTemperature) { expect_error_exit(generate("--prompt hi --temperature nan"), {"--temperature"}); }

// --top-p 1e-300 is valid (it used to be refused as "got 0.000000"): its nucleus is
// the most likely token alone, so a sampled run gives the greedy text.
TEST(CliErrorsTest, TinyTopPIsValidAndKeepsOnlyTheTopToken) {
  const CommandResult tiny = generate("--prompt ROMEO: --max-tokens 8 --temperature 0.9 --seed 5 --top-p 1e-300");
  const CommandResult greedy = generate("--prompt ROMEO: --max-tokens 8 --temperature 0");
  ASSERT_EQ(tiny.exit_code, 0) << tiny.output;
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  EXPECT_EQ(tiny.output.substr(0, tiny.output.find('[')), greedy.output.substr(0, greedy.output.find('[')));
}

TEST(CliErrorsTest, TopPZero) { expect_error_exit(generate("--prompt hi --top-p 0"), {"--top-p", "(0, 1]"}); }

TEST(CliErrorsTest, TopPAboveOne) { expect_error_exit(generate("--prompt hi --top-p 1.5"), {"--top-p", "1.5"}); }

TEST(CliErrorsTest, MinPOutOfRange) {
  expect_error_exit(generate("--prompt hi --min-p 1.5"), {"--min-p", "[0, 1]", "1.5"});
  expect_error_exit(generate("--prompt hi --min-p -0.1"), {"--min-p", "-0.1"});
}

TEST(CliErrorsTest, PenaltiesOutOfRange) {
  expect_error_exit(generate("--prompt hi --presence-penalty 2.5"), {"--presence-penalty", "[-2, 2]", "2.5"});
  expect_error_exit(generate("--prompt hi --frequency-penalty -3"), {"--frequency-penalty", "-3"});
  expect_error_exit(generate("--prompt hi --repetition-penalty 0"), {"--repetition-penalty", "> 0"});
  expect_error_exit(generate("--prompt hi --repetition-penalty nan"), {"--repetition-penalty"});
}

// The flags reach the engine: a strong repetition penalty changes the greedy text.
TEST(CliErrorsTest, RepetitionPenaltyChangesGreedyOutput) {
  const CommandResult plain = generate("--prompt ROMEO: --max-tokens 24 --temperature 0");
  const CommandResult penalized = generate("--prompt ROMEO: --max-tokens 24 --temperature 0 --repetition-penalty 2");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(penalized.exit_code, 0) << penalized.output;
  EXPECT_NE(plain.output.substr(0, plain.output.find('[')), penalized.output.substr(0, penalized.output.find('[')));
}

TEST(CliErrorsTest, NegativeTopK) { expect_error_exit(generate("--prompt hi --top-k -1"), {"--top-k"}); }

TEST(CliErrorsTest, NegativeThreads) { expect_error_exit(generate("--prompt hi --threads -2"), {"--threads"}); }

TEST(CliErrorsTest, UnknownFlag) {
  auto r = generate("--prompt hi --bogus-flag 3");
  expect_error_exit(r, {"--bogus-flag"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CliErrorsTest, NoSubcommand) {
  auto r = moe_cmd("");
  expect_error_exit(r, {"subcommand"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CliErrorsTest, UnknownLogLevel) {
  auto r = moe_cmd("--log-level bogus generate --model " + sh_quote(tiny_model_dir()) + " --prompt hi");
  expect_error_exit(r, {"--log-level", "bogus"});
}

TEST(CliErrorsTest, PromptPlusMaxTokensExceedsContext) {
  // A prompt of exactly 500 tokens (as the engine tokenizes it) + 20 new > 512.
  auto engine = Engine::open({.model_dir = tiny_model_dir(), .num_threads = 1});
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  std::string prompt;
  while (engine.value()->tokenize(prompt).size() < 500) prompt += "ROMEO: ";
  const size_t n = engine.value()->tokenize(prompt).size();
  ASSERT_LT(n + 20, 600u);
  ASSERT_LE(n, 512u);  // the prompt alone fits
  auto r = generate("--format json --temperature 0 --max-tokens 20 --prompt " + sh_quote(prompt));
  expect_error_exit(r, {"prompt (" + std::to_string(n) + " tokens)", "max_tokens (20)", "context of 512"});
}

TEST(CliErrorsTest, LogitsOutUnwritable) {
  auto r = generate("--format json --temperature 0 --max-tokens 1 --prompt ROMEO: --logits-out /nonexistent/dir/l.f32");
  expect_error_exit(r, {"--logits-out", "/nonexistent/dir/l.f32"});
}

TEST(CliErrorsTest, BenchBadFlags) {
  auto r = moe_cmd("bench generate --model " + sh_quote(tiny_model_dir()) + " --repeats 0");
  expect_error_exit(r, {"--repeats"});
  r = moe_cmd("bench generate --model " + sh_quote(tiny_model_dir()) + " --gen-tokens 1");
  expect_error_exit(r, {"--gen-tokens"});
  r = moe_cmd("bench generate --model " + sh_quote(tiny_model_dir()) + " --threads 0");
  expect_error_exit(r, {"--threads"});
  r = moe_cmd("bench generate --model " + sh_quote(tiny_model_dir()) + " --prompt-tokens 500 --gen-tokens 20");
  expect_error_exit(r, {"--prompt-tokens", "--gen-tokens", "context of 512"});
  // The sum overflows int: must still be caught, not wrap around and pass.
  r = moe_cmd("bench generate --model " + sh_quote(tiny_model_dir()) + " --prompt-tokens 2147483647 --gen-tokens 2");
  expect_error_exit(r, {"--prompt-tokens", "--gen-tokens", "context of 512"});
  r = moe_cmd("bench generate --model /nonexistent/bench-model");
  expect_error_exit(r, {"/nonexistent/bench-model"});
  r = moe_cmd("bench");
  expect_error_exit(r, {"subcommand"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CliHelpTest, BenchA2aHelpShowsNumTopkButNotTheAlias) {
  auto r = moe_cmd("bench a2a --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "--num-topk");
  EXPECT_EQ(r.output.find("--top-k"), std::string::npos) << r.output;
}

TEST(CliHelpTest, GenerateHelpListsFlags) {
  auto r = moe_cmd("generate --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* flag : {"--model", "--prompt", "--max-tokens", "--temperature", "--top-k", "--top-p", "--seed",
                           "--format", "--logits-out", "--threads", "--min-p", "--presence-penalty",
                           "--frequency-penalty", "--repetition-penalty"}) {
    EXPECT_CONTAINS(r.output, flag);
  }
}

TEST(CliHelpTest, BenchGenerateHelpListsFlags) {
  auto r = moe_cmd("bench generate --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* flag : {"--model", "--prompt-tokens", "--gen-tokens", "--repeats", "--threads", "--bw-buffer-mb"}) {
    EXPECT_CONTAINS(r.output, flag);
  }
}

TEST(CliHelpTest, TopLevelHelp) {
  auto r = moe_cmd("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "generate");
  EXPECT_CONTAINS(r.output, "bench");
}

// stdout only (stderr dropped), for output that must parse.
CommandResult generate_stdout(const std::string& args) {
  return run_command("{ " + moe_binary() + " generate --model " + sh_quote(tiny_model_dir()) + " " + args +
                     " 2>/dev/null; }");
}

TEST(CliGenerateTest, JsonOutputMatchesGolden) {
  const json gold = json::parse(read_file(golden_dir() + "/tiny-mixtral/romeo.json"));
  auto r = generate_stdout("--format json --temperature 0 --max-tokens 8 --prompt ROMEO:");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Exactly one line, one JSON object.
  ASSERT_FALSE(r.output.empty());
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  const json j = json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("prompt_token_ids"));
  ASSERT_TRUE(j.contains("output_token_ids"));
  ASSERT_TRUE(j.contains("text"));
  EXPECT_EQ(j["prompt_token_ids"].get<std::vector<int>>(), (std::vector<int>{1, 846, 2007}));
  const auto out = j["output_token_ids"].get<std::vector<int>>();
  const auto greedy = gold["greedy_token_ids"].get<std::vector<int>>();
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(out, std::vector<int>(greedy.begin(), greedy.begin() + 8));
  ASSERT_TRUE(j["text"].is_string());
  const std::string text = j["text"].get<std::string>();
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(gold["greedy_text"].get<std::string>().rfind(text, 0), 0u) << "text " << text;
  EXPECT_EQ(j["finish_reason"], "length");
}

TEST(CliGenerateTest, LogitsOutMatchesGolden) {
  ScopedTempDir dir("cli_logits");
  const std::string path = dir.file("romeo.logits.f32");
  auto r = generate("--format json --temperature 0 --max-tokens 1 --prompt ROMEO: --logits-out " + sh_quote(path));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto got = read_f32(path);
  const auto want = read_f32(golden_dir() + "/tiny-mixtral/romeo.logits.f32");
  ASSERT_EQ(want.size(), 2048u);
  ASSERT_EQ(got.size(), 2048u);
  const auto [mn, mx] = std::minmax_element(want.begin(), want.end());
  const double range = *mx - *mn;
  double max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) max_diff = std::max(max_diff, std::abs(double(got[i]) - want[i]));
  EXPECT_LE(max_diff, 1e-4 * range) << "max |diff| " << max_diff << ", range " << range;
}

TEST(CliGenerateTest, TextOutputStartsWithPrompt) {
  auto r = generate_stdout("--temperature 0 --max-tokens 8 --prompt ROMEO:");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("ROMEO:", 0), 0u) << r.output;
}

TEST(CliGenerateTest, SameSeedSameTokens) {
  const std::string args = "--format json --temperature 1 --top-k 0 --top-p 1 --seed 7 --max-tokens 12 --prompt ROMEO:";
  auto a = generate_stdout(args);
  auto b = generate_stdout(args);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
}

}  // namespace
}  // namespace moe
