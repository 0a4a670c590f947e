// An FP8 expert's block scales travel with its weights everywhere an expert is copied
// (TensorRT-LLM PR #14862 migrated weights without their scales and served garbage):
// the checkpoint store (save, restore, load_expert_from_store), live-rebalancing
// migration (migrate_experts), and failover's re-load of a lost expert. Each test
// compares the expert afterwards with the one bound from the HF directory: the same
// matrix and scale bytes and bitwise the same outputs (tests/fp8_model_util.h); a copy
// without its scales fails them. The model is the tiny Mixtral quantised to FP8 in
// blocks of [48, 80] (partial edge blocks).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <set>

#include "contains_util.h"
#include "fp8_model_util.h"
#include "moe/comm/faulty_communicator.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/engine/expert_loader.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/runtime/expert_migration.h"
#include "moe/runtime/failover.h"
#include "moe/store/store_writer.h"
#include "moe/transformer/decoder.h"
#include "store/store_test_util.h"
#include "test_util.h"

namespace moe {
namespace {

// Calls the collective switch_if_ready() until the background load is in on every rank,
// for up to 20 s (the ranks agree each call, so they leave together): a loaded machine
// can keep the loader thread off a core for longer than any fixed count of calls.
Status switch_when_ready(Failover& f) {
  for (int i = 0; i < 4000 && f.pending(); ++i) {
    MOE_RETURN_IF_ERROR(f.switch_if_ready());
    if (f.pending()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ok_status();
}

class Fp8ExpertTransferTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new testing::ScopedTempDir("fp8_transfer");
    testing::make_fp8_model(testing::tiny_model_dir(), tmp_->file("hf"), 48, 80);
    auto saved = save_to_store(tmp_->file("hf"), tmp_->file("store"), SaveOptions{});
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  void SetUp() override {
    auto config = load_model_config(hf_dir());
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    config_ = *config;
    ASSERT_TRUE(config_.fp8.enabled);
    auto hf = HfCheckpoint::open(hf_dir());
    ASSERT_TRUE(hf.ok()) << hf.status().to_string();
    hf_ = std::make_unique<HfCheckpoint>(std::move(hf).value());
    auto w = bind_weights(config_, *hf_);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    hf_weights_ = std::move(w).value();
    ASSERT_TRUE(hf_weights_.layers[1].experts[4].w2.has_scale());
  }
  static std::string hf_dir() { return tmp_->file("hf"); }
  static std::string store_dir() { return tmp_->file("store"); }
  const ExpertWeights& hf_expert(int l, int e) const {
    return hf_weights_.layers[static_cast<size_t>(l)].experts[static_cast<size_t>(e)];
  }

  static testing::ScopedTempDir* tmp_;
  ModelConfig config_;
  std::unique_ptr<HfCheckpoint> hf_;
  ModelWeights hf_weights_;
};
testing::ScopedTempDir* Fp8ExpertTransferTest::tmp_ = nullptr;

std::vector<float> logits_of(const ModelConfig& c, const ModelWeights& w) {
  Decoder dec(c, w, DecoderOptions{nullptr, KernelOptions{true}});
  const std::vector<int> tokens = {1, 450, 1681, 310, 278, 172, 1889, 13};
  KVCache cache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 16);
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  EXPECT_TRUE(dec.forward(tokens.data(), static_cast<int64_t>(tokens.size()), 0, &cache, logits.data()).ok());
  return logits;
}

// Save and full restore: every expert (and attention matrix) comes back with its scales.
TEST_F(Fp8ExpertTransferTest, StoreRoundTripKeepsScales) {
  auto store = StoreModel::open(store_dir());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ASSERT_TRUE((*store)->restore(nullptr, RestoreOptions{}, nullptr).ok());
  auto config = load_model_config(**store);
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->fp8.enabled);
  auto w = bind_weights(*config, **store);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  for (int l = 0; l < config_.num_hidden_layers; ++l)
    for (int e = 0; e < config_.router.num_experts; ++e)
      ASSERT_TRUE(testing::same_expert(w->layers[static_cast<size_t>(l)].experts[static_cast<size_t>(e)], hf_expert(l, e)))
          << "layer " << l << " expert " << e;
  EXPECT_EQ(logits_of(*config, *w), logits_of(config_, hf_weights_));
}

// load_expert_from_store (rebalancing and failover's loader): one expert at a time
// into a rank that restored none.
TEST_F(Fp8ExpertTransferTest, ExpertLoaderKeepsScales) {
  auto store = StoreModel::open(store_dir());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->restore([](int, int) { return false; }, RestoreOptions{}, nullptr).ok());
  auto w = bind_weights(config_, **store, [](int, int) { return false; });
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ExpertStore owned;
  for (int l = 0; l < config_.num_hidden_layers; ++l)
    for (int e = 0; e < config_.router.num_experts; ++e) {
      const Status st = load_expert_from_store(**store, config_, l, e, MigrationTarget{&w->layers, &owned});
      ASSERT_TRUE(st.ok()) << st.to_string();
      const ExpertWeights& got = w->layers[static_cast<size_t>(l)].experts[static_cast<size_t>(e)];
      ASSERT_TRUE(testing::same_expert(got, hf_expert(l, e))) << "layer " << l << " expert " << e;
      // The scales live in the rank's own copy of the shard, not in the store's.
      const std::vector<uint8_t>& buf = owned[{l, e}];
      const uint8_t* s = static_cast<const uint8_t*>(got.w2.scale);
      EXPECT_TRUE(s >= buf.data() && s + got.w2.scale_bytes() <= buf.data() + buf.size());
    }
  EXPECT_EQ(logits_of(config_, *w), logits_of(config_, hf_weights_));
}

// A store whose expert shard lacks a scale tensor: the loader names it, binds nothing.
TEST_F(Fp8ExpertTransferTest, ExpertLoaderNamesAMissingScale) {
  testing::ScopedTempDir dir("fp8_transfer_noscale");
  std::filesystem::create_directories(dir.file("hf"));
  testing::copy_model_dir(hf_dir(), dir.file("hf"));
  const std::string scale = "model.layers.1.block_sparse_moe.experts.4.w2.weight_scale_inv";
  auto tensors = testing::parse_safetensors(dir.file("hf/model.safetensors"));
  std::erase_if(tensors, [&](const testing::StTensor& t) { return t.name == scale; });
  testing::write_file(dir.file("hf/model.safetensors"),
                      testing::serialize_safetensors(tensors, nlohmann::json{{"format", "pt"}}));
  auto saved = save_to_store(dir.file("hf"), dir.file("store"), SaveOptions{});
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  auto store = StoreModel::open(dir.file("store"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->restore([](int, int) { return false; }, RestoreOptions{}, nullptr).ok());
  auto w = bind_weights(config_, **store, [](int, int) { return false; });
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ExpertStore owned;
  const Status st = load_expert_from_store(**store, config_, 1, 4, MigrationTarget{&w->layers, &owned});
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.to_string();
  EXPECT_CONTAINS(st.message(), "tensor '" + scale + "'");
  EXPECT_CONTAINS(st.message(), "layer 1, expert 4");
  EXPECT_FALSE(w->layers[1].experts[4].loaded);
  EXPECT_TRUE(owned.empty());
}

// Live rebalancing: rank 1 gains a replica of experts 2 and 5 of every layer from rank 0.
TEST_F(Fp8ExpertTransferTest, MigrationKeepsScales) {
  const int E = config_.router.num_experts;
  const ExpertPlacement current = ExpertPlacement::contiguous(E, 2);  // rank 0: 0..3, rank 1: 4..7
  std::vector<std::vector<int>> slots = {current.experts_on(0), current.experts_on(1)};
  slots[1].push_back(2);
  slots[0].push_back(5);
  auto next = ExpertPlacement::from_rank_slots(slots, E);
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  InProcessGroup group(2, 0, 30);
  std::vector<int> same(2, 0), has_scale(2, 0);
  std::vector<MigrationStats> stats(2);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const int r = comm.rank();
    MOE_ASSIGN_OR_RETURN(ModelWeights w, bind_weights(config_, *hf_, [&](int, int e) { return current.holds(r, e); }));
    std::vector<int> moe_layers;
    std::vector<const ExpertPlacement*> cur(static_cast<size_t>(config_.num_hidden_layers)), nxt = cur;
    for (int l = 0; l < config_.num_hidden_layers; ++l) {
      moe_layers.push_back(l);
      cur[static_cast<size_t>(l)] = &current;
      nxt[static_cast<size_t>(l)] = &next.value();
    }
    ExpertStore store;
    MOE_RETURN_IF_ERROR(migrate_experts(comm, MigrationPlan{config_, moe_layers, cur, nxt},
                                        MigrationTarget{&w.layers, &store}, &stats[static_cast<size_t>(r)]));
    const int gained = r == 1 ? 2 : 5;
    for (int l = 0; l < config_.num_hidden_layers; ++l) {
      const ExpertWeights& got = w.layers[static_cast<size_t>(l)].experts[static_cast<size_t>(gained)];
      has_scale[static_cast<size_t>(r)] += got.w1.has_scale() && got.w2.has_scale() && got.w3.has_scale();
      const auto same_one = testing::same_expert(got, hf_expert(l, gained));
      EXPECT_TRUE(same_one) << "rank " << r << " layer " << l;
      same[static_cast<size_t>(r)] += static_cast<bool>(same_one);
    }
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(same, (std::vector<int>{4, 4}));
  EXPECT_EQ(has_scale, (std::vector<int>{4, 4}));
  // Each expert's bytes include its scales.
  EXPECT_EQ(stats[1].bytes_received, static_cast<int64_t>(4 * hf_expert(0, 2).bytes()));
  EXPECT_GT(hf_expert(0, 2).bytes(), hf_expert(0, 2).w1.data_bytes() * 3);
}

// A sender whose header claims another block size than the model's is refused by name.
TEST_F(Fp8ExpertTransferTest, MigrationRefusesAWrongBlockSize) {
  const int E = config_.router.num_experts;
  const ExpertPlacement current = ExpertPlacement::contiguous(E, 2);
  std::vector<std::vector<int>> slots = {current.experts_on(0), current.experts_on(1)};
  slots[1].push_back(2);
  auto next = ExpertPlacement::from_rank_slots(slots, E);
  ASSERT_TRUE(next.ok());
  InProcessGroup group(2, 0, 30);
  std::vector<Status> results(2);
  (void)run_ranks(group, [&](Communicator& comm) -> Status {
    const int r = comm.rank();
    MOE_ASSIGN_OR_RETURN(ModelWeights w, bind_weights(config_, *hf_, [&](int, int e) { return current.holds(r, e); }));
    ModelConfig c = config_;
    if (r == 1) c.fp8.block_cols = 64;  // the receiver's model disagrees with the sender's scales
    std::vector<const ExpertPlacement*> cur(static_cast<size_t>(c.num_hidden_layers)), nxt = cur;
    cur[0] = &current;
    nxt[0] = &next.value();
    ExpertStore store;
    MigrationStats stats;
    results[static_cast<size_t>(r)] =
        migrate_experts(comm, MigrationPlan{c, {0}, cur, nxt}, MigrationTarget{&w.layers, &store}, &stats);
    return ok_status();
  });
  EXPECT_EQ(results[1].code(), StatusCode::kDataLoss) << results[1].to_string();
  EXPECT_CONTAINS(results[1].message(), "expert 2");
  EXPECT_CONTAINS(results[1].message(), "blocks of [48, 80]");
  EXPECT_CONTAINS(results[1].message(), "[48, 64]");
  EXPECT_FALSE(results[0].ok());
}

// Failover: rank 2 of 3 dies; its experts (6, 7 of every layer) are re-loaded from the
// store by the survivors, as the engine's failover does (engine_open.cc).
TEST_F(Fp8ExpertTransferTest, FailoverReloadKeepsScales) {
  auto old = ExpertPlacement::from_rank_slots({{0, 1, 2}, {3, 4, 5}, {6, 7}}, config_.router.num_experts);
  ASSERT_TRUE(old.ok());
  InProcessGroup group(2, 0, 30);
  std::vector<int> reloaded(2, 0);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const int r = comm.rank();
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<StoreModel> store, StoreModel::open(store_dir()));
    auto mine = [&](int, int e) { return old->holds(r, e); };
    MOE_RETURN_IF_ERROR(store->restore(mine, RestoreOptions{}, nullptr));
    MOE_ASSIGN_OR_RETURN(ModelWeights w, bind_weights(config_, *store, mine));
    std::vector<EpContext> ep(static_cast<size_t>(config_.num_hidden_layers));
    for (EpContext& ctx : ep) {
      ctx.comm = &comm;
      ctx.placement = *old;
    }
    ExpertStore owned;
    FailoverInputs in{.comm = &comm, .config = &config_, .ep = &ep, .layers = &w.layers, .expert_store = &owned,
                      .slots_per_rank = 4,
                      .wait_seconds = 0,
                      .load_expert = [&](int l, int e, std::vector<LayerWeights>* stage, ExpertStore* s) {
                        return load_expert_from_store(*store, config_, l, e, MigrationTarget{stage, s});
                      }};
    Failover f(in);
    MOE_RETURN_IF_ERROR(f.on_group_shrunk({0, 1}));
    MOE_RETURN_IF_ERROR(switch_when_ready(f));
    EXPECT_FALSE(f.pending());
    for (int l = 0; l < config_.num_hidden_layers; ++l)
      for (int e : {6, 7}) {
        if (!ep[static_cast<size_t>(l)].placement.holds(r, e)) continue;
        const ExpertWeights& got = w.layers[static_cast<size_t>(l)].experts[static_cast<size_t>(e)];
        EXPECT_TRUE(testing::same_expert(got, hf_expert(l, e))) << "rank " << r << " layer " << l << " expert " << e;
        ++reloaded[static_cast<size_t>(r)];
      }
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(reloaded[0] + reloaded[1], 2 * config_.num_hidden_layers);  // each lost expert re-loaded once
}

}  // namespace
}  // namespace moe
