// moe generate with capacity, overflow policy and --stats-out: bad flags get a clear
// error naming the flag; the statistics file accounts for every routed assignment;
// Qwen-MoE and DeepSeek-V3 checkpoints run with them.
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

CommandResult generate(const std::string& args) { return run_command(moe_binary() + " generate --threads 1 " + args); }

void expect_error_exit(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 134) << "crashed: " << r.output;
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

TEST(CapacityCliTest, NegativeCapacityFactor) {
  expect_error_exit(generate("--prompt hi --capacity-factor -1"), {"--capacity-factor", "positive"});
  expect_error_exit(generate("--prompt hi --capacity-factor 0"), {"--capacity-factor"});
  expect_error_exit(generate("--prompt hi --capacity-factor nan"), {"--capacity-factor"});
}

TEST(CapacityCliTest, UnknownOverflowPolicy) {
  expect_error_exit(generate("--prompt hi --overflow-policy spill"), {"--overflow-policy", "spill"});
}

TEST(CapacityCliTest, CapacityFactorWithDroplessIsContradictory) {
  expect_error_exit(generate("--prompt hi --capacity-factor 1 --overflow-policy dropless"),
                    {"--capacity-factor", "dropless"});
}

TEST(CapacityCliTest, BadStatsFlags) {
  expect_error_exit(generate("--prompt hi --max-tokens 2 --stats-out /nonexistent-dir/s.json"),
                    {"--stats-out", "/nonexistent-dir/s.json"});
  expect_error_exit(generate("--prompt hi --stats-ema-decay 1.5"), {"--stats-ema-decay"});
}

nlohmann::json run_stats(const std::string& flags, int max_tokens, std::vector<int>* prompt_ids) {
  const std::string dir = testing::make_temp_dir("capacity_cli");
  const std::string path = dir + "/stats.json";
  auto r = generate("--prompt 'ROMEO:' --temperature 0 --format json --max-tokens " + std::to_string(max_tokens) +
                    " --stats-out " + path + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto out = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  *prompt_ids = out["prompt_token_ids"].get<std::vector<int>>();
  return nlohmann::json::parse(testing::read_file(path));
}

TEST(CapacityCliTest, StatsAccountForEveryAssignment) {
  // Tiny Mixtral, top-2 of 8, 4 MoE layers. Prefill P tokens is one step, then
  // max_tokens - 1 decode steps of one token.
  std::vector<int> prompt;
  const int max_tokens = 6;
  const auto dropless = run_stats("", max_tokens, &prompt);
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t assignments = (P + max_tokens - 1) * 2;
  ASSERT_EQ(dropless["layers"].size(), 4u);
  for (const auto& layer : dropless["layers"]) {
    int64_t sum = 0;
    for (const auto& v : layer["tokens_per_expert"]) sum += v.get<int64_t>();
    EXPECT_EQ(sum, assignments);
    EXPECT_EQ(layer["steps"], max_tokens);
    EXPECT_EQ(layer["dropped"], 0);
  }
  // With capacity factor 0.5 each step's capacity is ceil(n * 2 * 0.5 / 8) per expert
  // (1 for a decode step, whose two assignments go to distinct experts): the prefill
  // drops. Run + dropped is still every assignment.
  const auto drop = run_stats("--capacity-factor 0.5", max_tokens, &prompt);
  int64_t total_dropped = 0;
  for (const auto& layer : drop["layers"]) {
    int64_t sum = 0;
    for (const auto& v : layer["tokens_per_expert"]) sum += v.get<int64_t>();
    EXPECT_EQ(sum + layer["dropped"].get<int64_t>(), assignments);
    EXPECT_EQ(layer["rerouted"], 0);
    total_dropped += layer["dropped"].get<int64_t>();
  }
  EXPECT_GT(total_dropped, 0);
  // Reroute moves some of the overflow to experts with room and accounts for all.
  const auto reroute = run_stats("--capacity-factor 0.5 --overflow-policy reroute", max_tokens, &prompt);
  int64_t total_rerouted = 0;
  for (const auto& layer : reroute["layers"]) {
    int64_t sum = 0;
    for (const auto& v : layer["tokens_per_expert"]) sum += v.get<int64_t>();
    EXPECT_EQ(sum + layer["dropped"].get<int64_t>(), assignments);
    total_rerouted += layer["rerouted"].get<int64_t>();
  }
  EXPECT_GT(total_rerouted, 0);
}

TEST(CapacityCliTest, QwenModelsGenerate) {
  for (const char* model : {"random-qwen2-moe", "random-qwen3-moe"}) {
    SCOPED_TRACE(model);
    auto r = generate("--model " + testing::source_dir() + "/tests/data/models/" + model +
                      " --prompt hi --max-tokens 4 --temperature 0 --format json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "\"output_token_ids\"");
  }
}

// DeepSeek-V3 (tiny-deepseek-v3: dense layer 0, MoE layers 1-3, top-4 of 16) with a
// binding capacity: the statistics cover the three MoE layers only, and run + dropped is
// every assignment.
TEST(CapacityCliTest, DeepseekV3StatsCoverItsMoeLayers) {
  std::vector<int> prompt;
  const int max_tokens = 5;
  const std::string model = "--model " + testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare ";
  const auto stats = run_stats(model + "--capacity-factor 0.5", max_tokens, &prompt);
  const int64_t assignments = (static_cast<int64_t>(prompt.size()) + max_tokens - 1) * 4;
  ASSERT_EQ(stats["layers"].size(), 3u);
  int64_t total_dropped = 0;
  for (const auto& layer : stats["layers"]) {
    EXPECT_EQ(layer["tokens_per_expert"].size(), 16u);
    int64_t sum = 0;
    for (const auto& v : layer["tokens_per_expert"]) sum += v.get<int64_t>();
    EXPECT_EQ(sum + layer["dropped"].get<int64_t>(), assignments);
    total_dropped += layer["dropped"].get<int64_t>();
  }
  EXPECT_GT(total_dropped, 0);
}

}  // namespace
}  // namespace moe
