// load_expert_from_store: a rank that holds no experts loads them one by one from a
// store; the decoder's logits are then bitwise those of the model bound from the HF
// directory. Bad requests and a shard with no good copy change nothing.
#include "moe/engine/expert_loader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "contains_util.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/store/shard_file.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_writer.h"
#include "moe/transformer/decoder.h"
#include "store/store_test_util.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

class ExpertLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::copy_tree(testing::tiny_model_dir(), hf_);
    auto saved = save_to_store(hf_, store_path_, SaveOptions{});
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
    auto store = StoreModel::open(store_path_);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(store).value();
    // No experts restored: the rank starts empty.
    ASSERT_TRUE(store_->restore([](int, int) { return false; }, RestoreOptions{}, nullptr).ok());
    auto config = load_model_config(*store_);
    ASSERT_TRUE(config.ok());
    config_ = *config;
    auto weights = bind_weights(config_, *store_, [](int, int) { return false; });
    ASSERT_TRUE(weights.ok()) << weights.status().to_string();
    weights_ = std::move(weights).value();
  }

  MigrationTarget target() { return MigrationTarget{.layers = &weights_.layers, .store = &expert_store_}; }

  testing::ShmTempDir tmp_{"expert_loader"};
  std::string hf_ = tmp_.file("hf");
  std::string store_path_ = tmp_.file("store");
  std::unique_ptr<StoreModel> store_;
  ModelConfig config_;
  ModelWeights weights_;
  ExpertStore expert_store_;
};

std::vector<float> logits_of(const ModelConfig& c, const ModelWeights& w) {
  Decoder dec(c, w, DecoderOptions{nullptr, KernelOptions{true}});
  const std::vector<int> tokens = {1, 450, 1681, 310, 278, 172, 1889, 13};
  KVCache cache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 16);
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  EXPECT_TRUE(dec.forward(tokens.data(), static_cast<int64_t>(tokens.size()), 0, &cache, logits.data()).ok());
  return logits;
}

TEST_F(ExpertLoaderTest, LoadingEveryExpertGivesTheHfModelsLogitsBitwise) {
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    for (int e = 0; e < config_.router.num_experts; ++e) {
      ASSERT_FALSE(weights_.layers[static_cast<size_t>(l)].experts[static_cast<size_t>(e)].loaded);
      const Status st = load_expert_from_store(*store_, config_, l, e, target());
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(weights_.layers[static_cast<size_t>(l)].experts[static_cast<size_t>(e)].loaded);
    }
  }
  EXPECT_EQ(expert_store_.size(), static_cast<size_t>(config_.num_hidden_layers * config_.router.num_experts));
  auto hf = HfCheckpoint::open(testing::tiny_model_dir());
  ASSERT_TRUE(hf.ok());
  auto hf_weights = bind_weights(config_, *hf);
  ASSERT_TRUE(hf_weights.ok());
  // The bytes of one expert, against the HF file's.
  const ExpertWeights& mine = weights_.layers[2].experts[5];
  const ExpertWeights& theirs = hf_weights->layers[2].experts[5];
  ASSERT_EQ(mine.w2.bytes(), theirs.w2.bytes());
  EXPECT_EQ(std::memcmp(mine.w2.data, theirs.w2.data, mine.w2.bytes()), 0);
  EXPECT_NE(mine.w2.data, theirs.w2.data);
  const std::vector<float> a = logits_of(config_, weights_), b = logits_of(config_, *hf_weights);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  // Loading again replaces the copy, still right.
  ASSERT_TRUE(load_expert_from_store(*store_, config_, 2, 5, target()).ok());
  EXPECT_EQ(std::memcmp(weights_.layers[2].experts[5].w2.data, theirs.w2.data, theirs.w2.bytes()), 0);
}

TEST_F(ExpertLoaderTest, BadRequestsChangeNothing) {
  for (auto [l, e] : {std::pair{-1, 0}, std::pair{4, 0}, std::pair{0, 8}, std::pair{0, -1}}) {
    const Status st = load_expert_from_store(*store_, config_, l, e, target());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << l << " " << e;
    EXPECT_CONTAINS(st.message(), "layer " + std::to_string(l) + ", expert " + std::to_string(e));
  }
  const Status no_target = load_expert_from_store(*store_, config_, 0, 0, MigrationTarget{});
  EXPECT_EQ(no_target.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(expert_store_.empty());
}

TEST_F(ExpertLoaderTest, ShardWithNoGoodCopyIsDataLossAndChangesNothing) {
  const ShardEntry* entry = store_->manifest().find_expert(1, 4);
  ASSERT_NE(entry, nullptr);
  const std::string path = store_shard_path(store_path_, entry->hash);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(kShardHeaderBytes + 5));
    const char c = static_cast<char>(f.get() ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(kShardHeaderBytes + 5));
    f.put(c);
  }
  fs::remove_all(hf_);
  const Status st = load_expert_from_store(*store_, config_, 1, 4, target());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(st.message(), "layer 1, expert 4");
  EXPECT_CONTAINS(st.message(), path);
  EXPECT_FALSE(weights_.layers[1].experts[4].loaded);
  EXPECT_TRUE(expert_store_.empty());
}

}  // namespace
}  // namespace moe
