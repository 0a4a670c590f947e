// `moe generate --model STORE` against `--model HF_DIR` (single process): the same greedy
// tokens and text and bitwise the same prompt logits, for the shipped model and the
// sharded test checkpoint; the restore is logged; a store whose shard has no good copy
// fails naming the layer, expert and file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "contains_util.h"
#include "moe/store/shard_file.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_reader.h"
#include "moe/store/store_writer.h"
#include "safetensors_util.h"
#include "store/store_test_util.h"
#include "e2e/generate_run.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::moe_binary;
using testing::run_command;
using testing::sh_quote;

const char* kPrompt = "KING HENRY IV:\nSo shaken as we are, so wan with care,";

using testing::GenRun;

GenRun generate(const std::string& model, const std::string& flags, const std::string& logits_path) {
  auto r = run_command(moe_binary() + " --log-level info generate --model " + sh_quote(model) + " --prompt " +
                       sh_quote(kPrompt) + " --max-tokens 24 --temperature 0 --format json --logits-out " +
                       sh_quote(logits_path) + " " + flags);
  return testing::parse_generate_run(r, logits_path);
}

void convert(const std::string& model, const std::string& store) { testing::convert_to_new_store(model, store); }

void expect_same_as_hf(const std::string& hf, const std::string& flags) {
  testing::ScopedTempDir tmp("store_generate");
  const std::string store = tmp.file("store");
  convert(hf, store);
  const GenRun a = generate(hf, flags, tmp.file("hf.f32"));
  const GenRun b = generate(store, flags, tmp.file("store.f32"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  ASSERT_TRUE(a.json.contains("output_token_ids")) << a.output;
  ASSERT_TRUE(b.json.contains("output_token_ids")) << b.output;
  EXPECT_GT(a.json["output_token_ids"].size(), 0u);
  EXPECT_EQ(b.json["output_token_ids"], a.json["output_token_ids"]);
  EXPECT_EQ(b.json["text"], a.json["text"]);
  ASSERT_GT(a.logits.size(), 0u);
  EXPECT_EQ(b.logits.size(), a.logits.size());
  EXPECT_TRUE(b.logits == a.logits) << "prompt logits differ bitwise";
  // The restore is logged: shards, experts, bytes, seconds, fallbacks.
  EXPECT_CONTAINS(b.output, "restored store " + store);
  EXPECT_CONTAINS(b.output, "0 fallback(s)");
}

TEST(StoreGenerate, ShippedModelSameTokensAndLogitsBitwise) {
  expect_same_as_hf(testing::tiny_model_dir(), "--threads 1");
}

TEST(StoreGenerate, ShippedModelTwoThreadsBatchInvariant) {
  expect_same_as_hf(testing::tiny_model_dir(), "--threads 2 --batch-invariant true");
}

TEST(StoreGenerate, ShardedCheckpointSameTokensAndLogitsBitwise) {
  expect_same_as_hf(testing::sharded_model_dir(), "--threads 1");
}

TEST(StoreGenerate, CorruptShardFallsBackOrFailsNamingIt) {
  testing::ScopedTempDir tmp("store_generate_bad");
  const std::string hf = tmp.file("hf"), store = tmp.file("store");
  testing::copy_tree(testing::tiny_model_dir(), hf);
  convert(hf, store);
  auto manifest = read_manifest(store, 1);
  ASSERT_TRUE(manifest.ok());
  const ShardEntry* entry = manifest->find_expert(3, 6);
  ASSERT_NE(entry, nullptr);
  const std::string shard = store_shard_path(store, entry->hash);
  fs::resize_file(shard, fs::file_size(shard) - 10);  // truncated

  // The HF directory it came from is still there: the run succeeds, saying so.
  const GenRun good = generate(testing::tiny_model_dir(), "--threads 1", tmp.file("good.f32"));
  const GenRun fallback = generate(store, "--threads 1", tmp.file("fallback.f32"));
  ASSERT_EQ(fallback.exit_code, 0) << fallback.output;
  EXPECT_EQ(fallback.json["output_token_ids"], good.json["output_token_ids"]);
  EXPECT_TRUE(fallback.logits == good.logits);
  EXPECT_CONTAINS(fallback.output, "layer 3, expert 6");
  EXPECT_CONTAINS(fallback.output, shard);
  EXPECT_CONTAINS(fallback.output, hf + "/model.safetensors");
  EXPECT_CONTAINS(fallback.output, "1 fallback(s)");

  // Without it: exit 1, naming the layer, expert and file.
  fs::remove_all(hf);
  const GenRun bad = generate(store, "--threads 1", tmp.file("bad.f32"));
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_CONTAINS(bad.output, "layer 3, expert 6");
  EXPECT_CONTAINS(bad.output, shard);
}

TEST(StoreGenerate, BrokenManifestOrCurrentIsAClearError) {
  testing::ScopedTempDir tmp("store_generate_broken");
  const std::string store = tmp.file("store");
  convert(testing::tiny_model_dir(), store);
  const std::string manifest = store_manifest_path(store, 1);
  const std::string text = testing::read_file(manifest);
  testing::write_file(manifest, text.substr(0, text.size() / 3));
  GenRun r = generate(store, "--threads 1", tmp.file("x.f32"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, manifest);
  fs::remove(manifest);
  r = generate(store, "--threads 1", tmp.file("x.f32"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, manifest);
  fs::remove(store_current_path(store));
  r = generate(store, "--threads 1", tmp.file("x.f32"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, store + "/config.json");  // neither a store nor an HF directory now
}

}  // namespace
}  // namespace moe
