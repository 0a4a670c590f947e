// HfCheckpoint::open on single-file and sharded checkpoints, and on broken ones: the
// message names the directory, index, shard and tensor involved.
#include "moe/model/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using moe::testing::copy_model_dir;
using moe::testing::read_json;
using moe::testing::ScopedTempDir;
using moe::testing::serialize_safetensors;
using moe::testing::sharded_model_dir;
using moe::testing::tiny_model_dir;
using moe::testing::to_bytes;
using moe::testing::write_file;
using moe::testing::write_json;

constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";

// A copy of the sharded test checkpoint in a temp dir, for corrupting.
class ShardedCopyTest : public ::testing::Test {
 protected:
  void SetUp() override { copy_model_dir(sharded_model_dir(), dir_.path()); }
  std::string index_path() const { return dir_.file("model.safetensors.index.json"); }

  ScopedTempDir dir_{"ckpt"};
};

TEST(CheckpointTest, DirWithoutSafetensorsIsNotFoundNamingDir) {
  ScopedTempDir dir("ckpt_empty");
  write_file(dir.file("config.json"), "{}");
  auto ckpt = HfCheckpoint::open(dir.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(ckpt.status().message(), dir.path());
  EXPECT_CONTAINS(ckpt.status().message(), "model.safetensors");
}

TEST(CheckpointTest, MissingDirIsNotFoundNamingDir) {
  const std::string dir = "/nonexistent/moe_ckpt_dir";
  auto ckpt = HfCheckpoint::open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(ckpt.status().message(), dir);
}

TEST(CheckpointTest, CorruptSingleFileNamesFile) {
  ScopedTempDir dir("ckpt_single");
  write_file(dir.file("model.safetensors"), "abc");
  auto ckpt = HfCheckpoint::open(dir.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(ckpt.status().message(), dir.file("model.safetensors"));
}

TEST(CheckpointTest, SingleFileCheckpointReads) {
  auto ckpt = HfCheckpoint::open(tiny_model_dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->shards().size(), 1u);
  EXPECT_EQ(ckpt->dir(), tiny_model_dir());
  EXPECT_EQ(ckpt->num_tensors(), 127u);
  auto embed = ckpt->get("model.embed_tokens.weight");
  ASSERT_TRUE(embed.ok()) << embed.status().to_string();
  EXPECT_EQ(embed.value()->shape, (std::vector<int64_t>{2048, 128}));
  EXPECT_EQ(embed.value()->dtype_name, "BF16");
}

TEST(CheckpointTest, GetMissingTensorNamesTensorAndDir) {
  auto ckpt = HfCheckpoint::open(tiny_model_dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_FALSE(ckpt->contains("model.layers.99.mlp.weight"));
  auto t = ckpt->get("model.layers.99.mlp.weight");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(t.status().message(), "'model.layers.99.mlp.weight'");
  EXPECT_CONTAINS(t.status().message(), tiny_model_dir());
}

TEST(CheckpointTest, ShardedCheckpointReads) {
  const std::string dir = sharded_model_dir();
  auto ckpt = HfCheckpoint::open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  const json index = read_json(dir + "/model.safetensors.index.json");
  EXPECT_EQ(ckpt->shards().size(), 2u);
  EXPECT_EQ(ckpt->num_tensors(), index["weight_map"].size());
  EXPECT_EQ(ckpt->total_bytes(), index["metadata"]["total_size"].get<size_t>());
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    auto t = ckpt->get(it.key());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t.value()->file, dir + "/" + it.value().get<std::string>()) << it.key();
  }
  auto embed = ckpt->get("model.embed_tokens.weight");
  ASSERT_TRUE(embed.ok());
  EXPECT_EQ(embed.value()->dtype_name, "F16");
  EXPECT_EQ(embed.value()->shape, (std::vector<int64_t>{2048, 64}));
  auto lm_head = ckpt->get("lm_head.weight");
  ASSERT_TRUE(lm_head.ok());
  EXPECT_EQ(lm_head.value()->dtype_name, "F32");
  EXPECT_EQ(lm_head.value()->file, dir + "/" + kShard2);
}

TEST_F(ShardedCopyTest, IndexPreferredOverSingleFile) {
  write_file(dir_.file("model.safetensors"), "garbage, never read");
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->shards().size(), 2u);
}

TEST_F(ShardedCopyTest, MalformedIndexJson) {
  write_file(index_path(), "{\"weight_map\": {\"lm_head.weight\": ");
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(ckpt.status().message(), index_path());
  EXPECT_CONTAINS(ckpt.status().message(), "weight_map");
}

TEST_F(ShardedCopyTest, IndexWithoutWeightMap) {
  write_json(index_path(), json{{"metadata", {{"total_size", 1}}}});
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(ckpt.status().message(), index_path());
  EXPECT_CONTAINS(ckpt.status().message(), "\"weight_map\"");
}

TEST_F(ShardedCopyTest, WeightMapEntryNotAString) {
  json index = read_json(index_path());
  index["weight_map"]["lm_head.weight"] = 2;
  write_json(index_path(), index);
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_CONTAINS(ckpt.status().message(), index_path());
  EXPECT_CONTAINS(ckpt.status().message(), "'lm_head.weight'");
}

TEST_F(ShardedCopyTest, ShardNameWithPathIsRejected) {
  json index = read_json(index_path());
  index["weight_map"]["lm_head.weight"] = std::string("../") + kShard2;
  write_json(index_path(), index);
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_CONTAINS(ckpt.status().message(), index_path());
  EXPECT_CONTAINS(ckpt.status().message(), std::string("'../") + kShard2 + "'");
}

TEST_F(ShardedCopyTest, IndexReferencesMissingShard) {
  json index = read_json(index_path());
  index["weight_map"]["lm_head.weight"] = "model-00003-of-00003.safetensors";
  write_json(index_path(), index);
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(ckpt.status().message(), index_path());
  EXPECT_CONTAINS(ckpt.status().message(), dir_.file("model-00003-of-00003.safetensors"));
}

TEST_F(ShardedCopyTest, ShardFileDeleted) {
  std::filesystem::remove(dir_.file(kShard2));
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(ckpt.status().message(), dir_.file(kShard2));
}

TEST_F(ShardedCopyTest, IndexPlacesTensorInShardThatLacksIt) {
  json index = read_json(index_path());
  ASSERT_EQ(index["weight_map"]["lm_head.weight"], kShard2);
  index["weight_map"]["lm_head.weight"] = kShard1;
  write_json(index_path(), index);
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(ckpt.status().message(), index_path());
  EXPECT_CONTAINS(ckpt.status().message(), "'lm_head.weight'");
  EXPECT_CONTAINS(ckpt.status().message(), kShard1);
  EXPECT_CONTAINS(ckpt.status().message(), "does not contain it");
}

TEST_F(ShardedCopyTest, IndexListsTensorNoShardHas) {
  json index = read_json(index_path());
  index["weight_map"]["model.layers.7.extra.weight"] = kShard2;
  write_json(index_path(), index);
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_CONTAINS(ckpt.status().message(), "'model.layers.7.extra.weight'");
  EXPECT_CONTAINS(ckpt.status().message(), kShard2);
}

TEST_F(ShardedCopyTest, CorruptShardNamesShardAndIndex) {
  const std::string shard = dir_.file(kShard1);
  std::string bytes = moe::testing::read_file(shard);
  write_file(shard, bytes.substr(0, bytes.size() / 2));  // truncated download
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(ckpt.status().message(), shard);
  EXPECT_CONTAINS(ckpt.status().message(), index_path());
  EXPECT_CONTAINS(ckpt.status().message(), "truncated");
}

TEST_F(ShardedCopyTest, ShardNameIsADirectory) {
  std::filesystem::create_directory(dir_.file("subdir.safetensors"));
  json index = read_json(index_path());
  index["weight_map"]["lm_head.weight"] = "subdir.safetensors";
  write_json(index_path(), index);
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_CONTAINS(ckpt.status().message(), dir_.file("subdir.safetensors"));
}

TEST_F(ShardedCopyTest, ExtraTensorInShardNotInIndexIsIgnored) {
  // A shard may hold tensors the index does not list; only listed ones are visible.
  auto tensors = moe::testing::parse_safetensors(dir_.file(kShard2));
  tensors.push_back({"unlisted.weight", "F32", {2}, to_bytes(std::vector<float>{1, 2})});
  write_file(dir_.file(kShard2), serialize_safetensors(tensors));
  auto ckpt = HfCheckpoint::open(dir_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_FALSE(ckpt->contains("unlisted.weight"));
}

}  // namespace
}  // namespace moe
