// `moe info`: parameter counts of the shipped checkpoints equal the element count of
// their safetensors files; DeepSeek-V3's published figures and its latent KV cache; bad
// paths and bad configs exit 1 naming the file and field, never crash.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::run_command;
using moe::testing::ScopedTempDir;
using moe::testing::sh_quote;
using nlohmann::json;

CommandResult info(const std::string& args) { return run_command(moe_binary() + " info " + args); }

json info_json(const std::string& model) {
  const CommandResult r = info("--json --model " + sh_quote(model));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return json::parse(r.output.substr(r.output.find('{')));
}

int64_t safetensors_elements(const std::string& path) {
  int64_t n = 0;
  for (const auto& t : moe::testing::parse_safetensors(path)) {
    int64_t e = 1;
    for (int64_t d : t.shape) e *= d;
    n += e;
  }
  return n;
}

// The count from config.json alone must equal what the weights file holds.
TEST(InfoCliTest, ShippedModelsMatchTheirWeights) {
  for (const std::string name : {"tiny-mixtral-shakespeare", "tiny-deepseek-v3-shakespeare"}) {
    const std::string dir = moe::testing::source_dir() + "/models/" + name;
    const json j = info_json(dir);
    EXPECT_EQ(j["params"]["total"]["sum"].get<int64_t>(), safetensors_elements(dir + "/model.safetensors")) << name;
    EXPECT_EQ(j["params"]["checkpoint"], j["params"]["total"]["sum"]) << name;
  }
  const json d = info_json(moe::testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare");
  EXPECT_EQ(d["family"], "deepseek_v3");
  EXPECT_EQ(d["attention"], "mla");
  EXPECT_TRUE(d["kv_cache"]["latent"].get<bool>());
}

TEST(InfoCliTest, DeepseekV3ConfigJson) {
  const std::string cfg = moe::testing::source_dir() + "/tests/data/configs/deepseek-v3.json";
  const json j = info_json(cfg);
  EXPECT_EQ(j["model_type"], "deepseek_v3");
  EXPECT_EQ(j["architecture"]["mla"]["kv_lora_rank"], 512);
  const int64_t total = j["params"]["total"]["sum"].get<int64_t>();
  EXPECT_GE(total, 670'500'000'000);  // published 671B
  EXPECT_LT(total, 671'500'000'000);
  const int64_t ckpt = j["params"]["checkpoint"].get<int64_t>();
  EXPECT_GE(ckpt, 684'500'000'000);  // Hugging Face: 685B (with the MTP layer and fp8 scales)
  EXPECT_LT(ckpt, 685'500'000'000);
  EXPECT_EQ(j["kv_cache"]["values_per_token_per_layer"], 576);
  EXPECT_EQ(j["kv_cache"]["f32_bytes_per_token"], 61 * 576 * 4);
  EXPECT_EQ(j["kv_cache"]["bf16_bytes_per_4096_tokens"], int64_t{61} * 576 * 2 * 4096);
  EXPECT_EQ(j["kv_cache"]["naive_values_per_token_per_layer"], 128 * (192 + 128));

  const CommandResult r = info("--model " + sh_quote(cfg));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"family: deepseek_v3", "MLA", "routed experts", "active/token", "HF checkpoint total",
                        "KV cache per token: 576 values per layer", "KV cache per 4096-token sequence",
                        "per-head K/V cache", "rope: theta 10000, scaling yarn (factor 40), interleaved"}) {
    EXPECT_CONTAINS(r.output, s);
  }
}

TEST(InfoCliTest, MixtralGqaKvCache) {
  const json j = info_json(moe::testing::source_dir() + "/tests/data/configs/mixtral-8x7b.json");
  EXPECT_EQ(j["attention"], "gqa");
  EXPECT_EQ(j["kv_cache"]["values_per_token_per_layer"], 2 * 8 * 128);
  EXPECT_EQ(j["kv_cache"]["f32_bytes_per_token"], 32 * 2 * 8 * 128 * 4);
  EXPECT_EQ(j["params"]["total"]["sum"], 46702792704LL);
  EXPECT_EQ(j["params"]["active_per_token"]["sum"], 12879925248LL);
}

void expect_error_exit(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: ");
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

TEST(InfoCliTest, BadPathsAndConfigs) {
  expect_error_exit(info("--model /nonexistent/model-dir"), {"/nonexistent/model-dir"});
  ScopedTempDir tmp("info_cli");
  expect_error_exit(info("--model " + sh_quote(tmp.path())), {tmp.path() + "/config.json"});  // dir without one
  const std::string bad_json = tmp.file("broken.json");
  moe::testing::write_file(bad_json, "{\"model_type\": ");
  expect_error_exit(info("--model " + sh_quote(bad_json)), {bad_json, "not a valid JSON"});
  json c = moe::testing::read_json(moe::testing::source_dir() + "/tests/data/configs/deepseek-v3.json");
  c["max_position_embeddings"] = 1000000000;
  const std::string huge = tmp.file("huge.json");
  moe::testing::write_json(huge, c);
  expect_error_exit(info("--model " + sh_quote(huge)), {huge, "'max_position_embeddings'"});
  c = moe::testing::read_json(moe::testing::source_dir() + "/tests/data/configs/deepseek-v3.json");
  c.erase("kv_lora_rank");
  moe::testing::write_json(huge, c);
  expect_error_exit(info("--model " + sh_quote(huge)), {huge, "'kv_lora_rank'"});
  const CommandResult usage = info("");
  EXPECT_EQ(usage.exit_code, 2) << usage.output;
  EXPECT_CONTAINS(usage.output, "--model");
}

TEST(InfoCliTest, Help) {
  const CommandResult r = info("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "--model");
  EXPECT_CONTAINS(r.output, "--json");
}

}  // namespace
}  // namespace moe
