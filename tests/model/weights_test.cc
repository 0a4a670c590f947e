// bind_weights / Engine::open on copies of the sharded test checkpoint whose config or
// tensors disagree: the error names the tensor, its file, and both shapes.
#include "moe/model/weights.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "moe/engine.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using moe::testing::copy_model_dir;
using moe::testing::parse_safetensors;
using moe::testing::read_json;
using moe::testing::ScopedTempDir;
using moe::testing::serialize_safetensors;
using moe::testing::sharded_model_dir;
using moe::testing::write_file;
using moe::testing::write_json;

constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override { copy_model_dir(sharded_model_dir(), dir_.path()); }

  std::string config_path() const { return dir_.file("config.json"); }
  std::string index_path() const { return dir_.file("model.safetensors.index.json"); }

  void set_config(const std::string& field, const json& value) {
    json c = read_json(config_path());
    c[field] = value;
    write_json(config_path(), c);
  }

  // Loads config + checkpoint from the copy and binds; both must load.
  StatusOr<ModelWeights> bind(const ExpertFilter& filter = nullptr) {
    auto config = load_model_config(dir_.path());
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    if (!config.ok()) return config.status();
    auto ckpt = HfCheckpoint::open(dir_.path());
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    if (!ckpt.ok()) return ckpt.status();
    ckpt_ = std::make_unique<HfCheckpoint>(std::move(ckpt).value());
    return bind_weights(config.value(), *ckpt_, filter);
  }

  // Rewrites `shard` without the tensor `name`.
  void drop_tensor_from_shard(const std::string& shard, const std::string& name) {
    auto tensors = parse_safetensors(dir_.file(shard));
    const size_t before = tensors.size();
    std::erase_if(tensors, [&](const auto& t) { return t.name == name; });
    ASSERT_EQ(tensors.size() + 1, before) << name << " not in " << shard;
    write_file(dir_.file(shard), serialize_safetensors(tensors, json{{"format", "pt"}}));
  }

  ScopedTempDir dir_{"weights"};
  std::unique_ptr<HfCheckpoint> ckpt_;
};

TEST_F(WeightsTest, UnmodifiedCopyBinds) {
  auto w = bind();
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->layers.size(), 2u);
  ASSERT_EQ(w->layers[0].experts.size(), 4u);
  EXPECT_TRUE(w->layers[1].experts[3].loaded);
  EXPECT_EQ(w->layers[0].experts[0].w1.rows, 96);
  EXPECT_EQ(w->layers[0].experts[0].w1.cols, 64);
  EXPECT_EQ(w->layers[0].experts[0].w1.dtype, DType::kF16);
  EXPECT_EQ(w->lm_head.dtype, DType::kF32);
  EXPECT_EQ(w->final_norm.size(), 64u);
}

TEST_F(WeightsTest, IntermediateSizeMismatchNamesTensorFileAndShapes) {
  set_config("intermediate_size", 100);
  auto w = bind();
  ASSERT_FALSE(w.ok());
  const std::string& m = w.status().message();
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(m, "'model.layers.0.block_sparse_moe.experts.0.w1.weight'");
  EXPECT_CONTAINS(m, dir_.file(kShard1));
  EXPECT_CONTAINS(m, "has shape [96, 64]");
  EXPECT_CONTAINS(m, "config.json implies [100, 64]");
}

TEST_F(WeightsTest, EngineOpenReportsShapeMismatch) {
  set_config("intermediate_size", 100);
  auto engine = Engine::open({.model_dir = dir_.path()});
  ASSERT_FALSE(engine.ok());
  const std::string& m = engine.status().message();
  EXPECT_CONTAINS(m, "'model.layers.0.block_sparse_moe.experts.0.w1.weight'");
  EXPECT_CONTAINS(m, dir_.file(kShard1));
  EXPECT_CONTAINS(m, "[96, 64]");
  EXPECT_CONTAINS(m, "[100, 64]");
}

TEST_F(WeightsTest, HiddenSizeMismatchNamesEmbedding) {
  set_config("hidden_size", 80);
  set_config("head_dim", 20);
  auto w = bind();
  ASSERT_FALSE(w.ok());
  const std::string& m = w.status().message();
  EXPECT_CONTAINS(m, "'model.embed_tokens.weight'");
  EXPECT_CONTAINS(m, dir_.file(kShard1));
  EXPECT_CONTAINS(m, "[2048, 64]");
  EXPECT_CONTAINS(m, "[2048, 80]");
}

TEST_F(WeightsTest, ExpertCountMismatchNamesRouter) {
  set_config("num_local_experts", 6);
  auto w = bind();
  ASSERT_FALSE(w.ok());
  const std::string& m = w.status().message();
  EXPECT_CONTAINS(m, "'model.layers.0.block_sparse_moe.gate.weight'");
  EXPECT_CONTAINS(m, "[4, 64]");
  EXPECT_CONTAINS(m, "[6, 64]");
}

TEST_F(WeightsTest, HeadDimMismatchNamesProjection) {
  set_config("head_dim", 8);
  auto w = bind();
  ASSERT_FALSE(w.ok());
  const std::string& m = w.status().message();
  EXPECT_CONTAINS(m, "'model.layers.0.self_attn.q_proj.weight'");
  EXPECT_CONTAINS(m, "[64, 64]");
  EXPECT_CONTAINS(m, "[32, 64]");
}

TEST_F(WeightsTest, MoreLayersThanCheckpointNamesMissingTensor) {
  set_config("num_hidden_layers", 3);
  auto w = bind();
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(w.status().message(), "'model.layers.2.");
  EXPECT_CONTAINS(w.status().message(), dir_.path());
}

TEST_F(WeightsTest, TensorDroppedFromIndexIsNamed) {
  const std::string name = "model.layers.1.self_attn.k_proj.weight";
  json index = read_json(index_path());
  ASSERT_EQ(index["weight_map"].erase(name), 1u);
  write_json(index_path(), index);
  auto w = bind();
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(w.status().message(), "'" + name + "'");
  EXPECT_CONTAINS(w.status().message(), dir_.path());

  auto engine = Engine::open({.model_dir = dir_.path()});
  ASSERT_FALSE(engine.ok());
  EXPECT_CONTAINS(engine.status().message(), "'" + name + "'");
}

TEST_F(WeightsTest, TensorRemovedFromShardAndIndexIsNamed) {
  const std::string name = "model.norm.weight";
  drop_tensor_from_shard(kShard2, name);
  json index = read_json(index_path());
  ASSERT_EQ(index["weight_map"].erase(name), 1u);
  write_json(index_path(), index);
  auto engine = Engine::open({.model_dir = dir_.path()});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(engine.status().message(), "'" + name + "'");
  EXPECT_CONTAINS(engine.status().message(), dir_.path());
}

TEST_F(WeightsTest, ExpertTensorRemovedFromShardButStillInIndex) {
  // The index still lists the tensor: HfCheckpoint::open catches it, naming the shard.
  const std::string name = "model.layers.0.block_sparse_moe.experts.2.w3.weight";
  drop_tensor_from_shard(kShard1, name);
  auto engine = Engine::open({.model_dir = dir_.path()});
  ASSERT_FALSE(engine.ok());
  EXPECT_CONTAINS(engine.status().message(), "'" + name + "'");
  EXPECT_CONTAINS(engine.status().message(), kShard1);
}

TEST_F(WeightsTest, SingleFileCheckpointMissingTensor) {
  // Merge both shards into one model.safetensors without one expert matrix.
  const std::string name = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
  auto tensors = parse_safetensors(dir_.file(kShard1));
  for (auto& t : parse_safetensors(dir_.file(kShard2))) tensors.push_back(std::move(t));
  std::erase_if(tensors, [&](const auto& t) { return t.name == name; });
  std::filesystem::remove(index_path());
  std::filesystem::remove(dir_.file(kShard1));
  std::filesystem::remove(dir_.file(kShard2));
  write_file(dir_.file("model.safetensors"), serialize_safetensors(tensors));
  auto engine = Engine::open({.model_dir = dir_.path()});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(engine.status().message(), "'" + name + "'");
}

TEST_F(WeightsTest, MissingExpertNotNeededWhenFilteredOut) {
  const std::string name = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
  json index = read_json(index_path());
  index["weight_map"].erase(name);
  write_json(index_path(), index);
  auto w = bind([](int layer, int expert) { return !(layer == 1 && expert == 3); });
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_FALSE(w->layers[1].experts[3].loaded);
  EXPECT_TRUE(w->layers[1].experts[2].loaded);
}

TEST_F(WeightsTest, TiedEmbeddingsWithoutLmHead) {
  json index = read_json(index_path());
  index["weight_map"].erase("lm_head.weight");
  write_json(index_path(), index);
  {
    auto w = bind();  // not tied: lm_head is required
    ASSERT_FALSE(w.ok());
    EXPECT_CONTAINS(w.status().message(), "'lm_head.weight'");
  }
  set_config("tie_word_embeddings", true);
  auto w = bind();
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->lm_head.data, w->embed_tokens.data);
}

TEST_F(WeightsTest, TransposedMatrixIsRejected) {
  // Same element count, wrong orientation: the shape check must catch it.
  const std::string name = "model.layers.0.block_sparse_moe.experts.1.w2.weight";
  auto tensors = parse_safetensors(dir_.file(kShard1));
  for (auto& t : tensors) {
    if (t.name == name) std::swap(t.shape[0], t.shape[1]);
  }
  write_file(dir_.file(kShard1), serialize_safetensors(tensors));
  auto w = bind();
  ASSERT_FALSE(w.ok());
  EXPECT_CONTAINS(w.status().message(), "'" + name + "'");
  EXPECT_CONTAINS(w.status().message(), "has shape [96, 64]");
  EXPECT_CONTAINS(w.status().message(), "implies [64, 96]");
}

TEST_F(WeightsTest, VocabLargerInTokenizerThanConfig) {
  // Config and embeddings agree on a smaller vocabulary than the tokenizer's 2048 pieces.
  set_config("vocab_size", 1024);
  auto tensors = parse_safetensors(dir_.file(kShard1));
  for (auto& t : tensors) {
    if (t.name == "model.embed_tokens.weight") {
      t.shape[0] = 1024;
      t.bytes.resize(t.bytes.size() / 2);
    }
  }
  write_file(dir_.file(kShard1), serialize_safetensors(tensors));
  auto t2 = parse_safetensors(dir_.file(kShard2));
  for (auto& t : t2) {
    if (t.name == "lm_head.weight") {
      t.shape[0] = 1024;
      t.bytes.resize(t.bytes.size() / 2);
    }
  }
  write_file(dir_.file(kShard2), serialize_safetensors(t2));
  auto engine = Engine::open({.model_dir = dir_.path()});
  ASSERT_FALSE(engine.ok());
  EXPECT_CONTAINS(engine.status().message(), dir_.file("tokenizer.model"));
  EXPECT_CONTAINS(engine.status().message(), "vocab_size 1024");
}

}  // namespace
}  // namespace moe
