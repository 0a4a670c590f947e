// recover_experts_from_peers over two in-process ranks, each with its own store of the
// shipped model: rank 1's copy of an expert it shares with rank 0 is corrupt and its HF
// source is gone, so rank 1 takes rank 0's copy (its bytes then equal the HF file's);
// an expert no other rank holds fails on both ranks; a copy damaged in transit is
// caught by the hash, and every rank returns an error.
#include "moe/engine/peer_expert_recovery.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "contains_util.h"
#include "moe/comm/faulty_communicator.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/store/shard_file.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_reader.h"
#include "moe/store/store_writer.h"
#include "log_capture.h"
#include "store/store_test_util.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::mixtral_expert_tensor;

constexpr int kLayers = 4, kExperts = 8;

using testing::LogCapture;

using testing::flip_byte;

// The same placement on every layer: rank 0 holds experts 0-3, rank 1 holds 3-7.
std::vector<ExpertPlacement> shared_expert_3() {
  auto p = ExpertPlacement::from_rank_slots({{0, 1, 2, 3}, {3, 4, 5, 6, 7}}, kExperts);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return std::vector<ExpertPlacement>(kLayers, *p);
}

// What one rank loaded and ended with.
struct Rank {
  std::unique_ptr<ModelSource> source;
  StoreModel* store = nullptr;
  ModelConfig config;
  ModelWeights weights;
  std::vector<MissingExpert> missing;
  Status result;
  PeerRecoveryReport report;
};

class PeerRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    convert(testing::tiny_model_dir(), store0_);
    // Rank 1's store comes from a copy that is then removed: no HF fallback for it.
    const std::string gone = tmp_.file("hf_gone");
    testing::copy_tree(testing::tiny_model_dir(), gone);
    convert(gone, store1_);
    fs::remove_all(gone);
  }

  static void convert(const std::string& model, const std::string& store) {
    SaveOptions o;
    o.require_new_store = true;
    auto saved = save_to_store(model, store, o);
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  }

  // The shard file of expert (layer, expert) in `store`.
  static std::string shard_file(const std::string& store, int layer, int expert) {
    auto version = current_version(store);
    auto m = read_manifest(store, *version);
    const ShardEntry* e = m->find_expert(layer, expert);
    return e ? store_shard_path(store, e->hash) : std::string();
  }
  static Hash128 shard_hash(const std::string& store, int layer, int expert) {
    auto m = read_manifest(store, current_version(store).value());
    return m->find_expert(layer, expert)->hash;
  }

  // Loads rank r as Engine::open does under EP: its store (or the HF directory if
  // `store` is empty) restored with tolerate_missing_experts, bound without the missing
  // experts.
  static Status load(Communicator& comm, const std::string& store, const std::vector<ExpertPlacement>& placements,
                     Rank* out) {
    const int me = comm.rank();
    ExpertFilter filter = [&placements, me](int l, int e) { return placements[static_cast<size_t>(l)].holds(me, e); };
    if (store.empty()) {
      MOE_ASSIGN_OR_RETURN(HfCheckpoint hf, HfCheckpoint::open(testing::tiny_model_dir()));
      out->source = std::make_unique<HfCheckpoint>(std::move(hf));
    } else {
      MOE_ASSIGN_OR_RETURN(auto model, StoreModel::open(store));
      RestoreOptions o;
      o.tolerate_missing_experts = true;
      RestoreReport report;
      MOE_RETURN_IF_ERROR(model->restore(filter, o, &report));
      out->missing = report.missing;
      out->store = model.get();
      out->source = std::move(model);
    }
    MOE_ASSIGN_OR_RETURN(out->config, load_model_config(*out->source));
    std::set<std::pair<int, int>> gone;
    for (const MissingExpert& m : out->missing) gone.insert({m.layer, m.expert});
    MOE_ASSIGN_OR_RETURN(out->weights, bind_weights(out->config, *out->source, [&](int l, int e) {
                           return filter(l, e) && gone.count({l, e}) == 0;
                         }));
    return ok_status();
  }

  // Both ranks load (rank r from stores[r]), then recover; rank 1 may talk through a
  // faulty communicator.
  std::array<Rank, 2> run(const std::array<std::string, 2>& stores, const std::vector<ExpertPlacement>& placements,
                          const FaultPlan* rank1_faults = nullptr) {
    std::array<Rank, 2> ranks;
    InProcessGroup group(2, 0, /*timeout_seconds=*/20);
    const Status st = run_ranks(group, [&](Communicator& inner) -> Status {
      std::unique_ptr<FaultyCommunicator> faulty;
      Communicator* comm = &inner;
      if (rank1_faults != nullptr && inner.rank() == 1) {
        faulty = std::make_unique<FaultyCommunicator>(inner, *rank1_faults);
        comm = faulty.get();
      }
      Rank& me = ranks[static_cast<size_t>(inner.rank())];
      MOE_RETURN_IF_ERROR(load(*comm, stores[static_cast<size_t>(inner.rank())], placements, &me));
      PeerRecoveryInputs in{.comm = comm,
                            .config = &me.config,
                            .source = me.source.get(),
                            .store = me.store,
                            .placements = &placements,
                            .layers = &me.weights.layers,
                            .missing = me.missing};
      me.result = recover_experts_from_peers(in, &me.report);
      return ok_status();  // each rank's result is checked by the test
    });
    EXPECT_TRUE(st.ok()) << st.to_string();
    return ranks;
  }

  testing::ShmTempDir tmp_{"peer_recovery"};
  std::string store0_ = tmp_.file("store0");
  std::string store1_ = tmp_.file("store1");
};

// Expert (l, e)'s w1/w2/w3 bytes as bound, against the HF file's bytes (read directly).
void expect_expert_equals_hf_file(const ExpertWeights& w, int l, int e) {
  ASSERT_TRUE(w.loaded);
  const std::string file = testing::tiny_model_dir() + "/model.safetensors";
  const std::string bytes = testing::read_file(file);
  const Weight2D* parts[3] = {&w.w1, &w.w2, &w.w3};
  const char* names[3] = {"w1", "w2", "w3"};
  for (int i = 0; i < 3; ++i) {
    const auto [offset, size] = testing::tensor_span_in_file(file, mixtral_expert_tensor(l, e, names[i]));
    ASSERT_EQ(parts[i]->bytes(), size) << names[i];
    EXPECT_EQ(std::memcmp(parts[i]->data, bytes.data() + offset, size), 0) << "layer " << l << ", expert " << e << " "
                                                                             << names[i];
  }
}

TEST_F(PeerRecoveryTest, NothingMissingIsANoOp) {
  auto ranks = run({store0_, store1_}, shared_expert_3());
  for (const Rank& r : ranks) {
    EXPECT_TRUE(r.result.ok()) << r.result.to_string();
    EXPECT_EQ(r.report.experts_received, 0);
    EXPECT_EQ(r.report.experts_sent, 0);
  }
}

TEST_F(PeerRecoveryTest, CorruptSharedExpertIsTakenFromThePeerAndEqualsTheHfBytes) {
  const std::string bad = shard_file(store1_, 1, 3);
  flip_byte(bad, kShardHeaderBytes + 100);
  std::array<Rank, 2> ranks;
  std::string log;
  {
    LogCapture capture;
    ranks = run({store0_, store1_}, shared_expert_3());
    log = capture.text();
  }
  ASSERT_EQ(ranks[1].missing.size(), 1u);
  EXPECT_EQ(ranks[1].missing[0].layer, 1);
  EXPECT_EQ(ranks[1].missing[0].expert, 3);
  for (const Rank& r : ranks) ASSERT_TRUE(r.result.ok()) << r.result.to_string();
  EXPECT_EQ(ranks[0].report.experts_sent, 1);
  EXPECT_EQ(ranks[1].report.experts_received, 1);
  expect_expert_equals_hf_file(ranks[1].weights.layers[1].experts[3], 1, 3);
  // get() serves the adopted tensors too.
  auto t = ranks[1].store->get(mixtral_expert_tensor(1, 3, "w2"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->data, ranks[1].weights.layers[1].experts[3].w2.data);
  // The warning names the expert, the bad file and where the good copy came from.
  EXPECT_CONTAINS(log, "layer 1, expert 3");
  EXPECT_CONTAINS(log, bad);
  EXPECT_CONTAINS(log, "using the copy from rank 0 (hash verified)");
}

TEST_F(PeerRecoveryTest, AnHfRankServesAsTheSource) {
  flip_byte(shard_file(store1_, 2, 3), kShardHeaderBytes + 5);
  auto ranks = run({"", store1_}, shared_expert_3());
  for (const Rank& r : ranks) ASSERT_TRUE(r.result.ok()) << r.result.to_string();
  EXPECT_EQ(ranks[0].report.experts_sent, 1);
  expect_expert_equals_hf_file(ranks[1].weights.layers[2].experts[3], 2, 3);
}

TEST_F(PeerRecoveryTest, ExpertNoOtherRankHoldsFailsOnBothRanks) {
  const std::string bad = shard_file(store1_, 1, 5);  // only rank 1 holds expert 5
  flip_byte(bad, kShardHeaderBytes + 9);
  auto ranks = run({store0_, store1_}, shared_expert_3());
  for (const Rank& r : ranks) {
    ASSERT_FALSE(r.result.ok());
    EXPECT_EQ(r.result.code(), StatusCode::kDataLoss) << r.result.to_string();
    EXPECT_CONTAINS(r.result.message(), "layer 1, expert 5: rank 1 has no good copy");
    EXPECT_CONTAINS(r.result.message(), "no other rank holds a copy");
  }
  EXPECT_CONTAINS(ranks[1].result.message(), bad);  // rank 1's own read error
  EXPECT_FALSE(ranks[1].weights.layers[1].experts[5].loaded);
}

TEST_F(PeerRecoveryTest, BothReplicasCorruptFailsOnBothRanks) {
  // Rank 0's store, too, without its HF source.
  const std::string gone = tmp_.file("hf_gone0"), store0 = tmp_.file("store0_nosource");
  testing::copy_tree(testing::tiny_model_dir(), gone);
  convert(gone, store0);
  fs::remove_all(gone);
  flip_byte(shard_file(store0, 1, 3), kShardHeaderBytes + 9);
  flip_byte(shard_file(store1_, 1, 3), kShardHeaderBytes + 9);
  auto ranks = run({store0, store1_}, shared_expert_3());
  for (const Rank& r : ranks) {
    ASSERT_FALSE(r.result.ok());
    EXPECT_EQ(r.result.code(), StatusCode::kDataLoss) << r.result.to_string();
    EXPECT_CONTAINS(r.result.message(), "layer 1, expert 3: rank 0 has no good copy");
    EXPECT_CONTAINS(r.result.message(), "no other rank holds a copy");
  }
  EXPECT_CONTAINS(ranks[0].result.message(), shard_file(store0, 1, 3));
}

TEST_F(PeerRecoveryTest, TolerateMissingExpertsStillFailsOnANonExpertShard) {
  auto m = read_manifest(store1_, current_version(store1_).value());
  const ShardEntry* layer = m->find_shard("layer.2");
  ASSERT_NE(layer, nullptr);
  const std::string bad = store_shard_path(store1_, layer->hash);
  flip_byte(bad, kShardHeaderBytes + 9);
  auto model = StoreModel::open(store1_);
  ASSERT_TRUE(model.ok());
  RestoreOptions o;
  o.tolerate_missing_experts = true;
  const Status st = (*model)->restore(nullptr, o, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(st.message(), bad);
}

TEST_F(PeerRecoveryTest, CopyDamagedInTransitIsCaughtByTheHashOnEveryRank) {
  flip_byte(shard_file(store1_, 1, 3), kShardHeaderBytes + 100);
  const FaultPlan faults{.corrupt_recv_tag = kPeerRecoveryTagData};
  auto ranks = run({store0_, store1_}, shared_expert_3(), &faults);
  ASSERT_FALSE(ranks[1].result.ok());
  EXPECT_EQ(ranks[1].result.code(), StatusCode::kDataLoss) << ranks[1].result.to_string();
  EXPECT_CONTAINS(ranks[1].result.message(), "layer 1, expert 3");
  EXPECT_CONTAINS(ranks[1].result.message(), "rank 0");
  EXPECT_CONTAINS(ranks[1].result.message(), shard_hash(store1_, 1, 3).hex());  // expected
  EXPECT_FALSE(ranks[1].weights.layers[1].experts[3].loaded);
  ASSERT_FALSE(ranks[0].result.ok());
  EXPECT_CONTAINS(ranks[0].result.message(), "1 rank(s) failed to recover experts");
}

TEST(StoreModelAdopt, RejectsWrongSizeAndHashAndAcceptsTheRightBytes) {
  testing::ShmTempDir tmp("adopt");
  const std::string store = tmp.file("store");
  SaveOptions o;
  auto saved = save_to_store(testing::tiny_model_dir(), store, o);
  ASSERT_TRUE(saved.ok());
  auto model = StoreModel::open(store);
  ASSERT_TRUE(model.ok());
  std::vector<uint8_t> bytes;
  EXPECT_EQ((*model)->adopt_expert_shard(1, 2, bytes, "rank 9").code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*model)->restore([](int, int) { return false; }, RestoreOptions{}, nullptr).ok());
  auto shard = (*model)->read_expert(1, 2);
  ASSERT_TRUE(shard.ok());
  bytes = shard->bytes;
  bytes.pop_back();
  Status st = (*model)->adopt_expert_shard(1, 2, bytes, "rank 9");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(st.message(), "layer 1, expert 2");
  EXPECT_CONTAINS(st.message(), "rank 9");
  bytes = shard->bytes;
  bytes[10] ^= 1;
  st = (*model)->adopt_expert_shard(1, 2, bytes, "rank 9");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  const Hash128 actual = hash_bytes(bytes.data(), bytes.size());
  EXPECT_CONTAINS(st.message(), actual.hex());
  EXPECT_EQ((*model)->get(mixtral_expert_tensor(1, 2, "w1")).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*model)->adopt_expert_shard(1, kExperts, shard->bytes, "rank 9").code(), StatusCode::kNotFound);
  ASSERT_TRUE((*model)->adopt_expert_shard(1, 2, shard->bytes, "rank 9").ok());
  auto t = (*model)->get(mixtral_expert_tensor(1, 2, "w1"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::string file = testing::tiny_model_dir() + "/model.safetensors";
  const auto [offset, size] = testing::tensor_span_in_file(file, mixtral_expert_tensor(1, 2, "w1"));
  ASSERT_EQ((*t)->nbytes, size);
  EXPECT_EQ(std::memcmp((*t)->data, testing::read_file(file).data() + offset, size), 0);
}

}  // namespace
}  // namespace moe
