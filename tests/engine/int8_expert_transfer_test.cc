// "--weights int8" experts (model/int8_quant.h) survive live-rebalancing migration
// (migrate_experts): the receiver gets an I8 expert with its [1, 32] f32 block scales,
// byte for byte the sender's, so both ranks compute the same expert. The model is the
// shipped tiny Mixtral, its experts quantised at "load" as the engine does.
#include <gtest/gtest.h>

#include <cstring>

#include "moe/comm/inproc_communicator.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/int8_quant.h"
#include "moe/runtime/expert_migration.h"
#include "test_util.h"

namespace moe {
namespace {

bool same_bytes(const Weight2D& a, const Weight2D& b) {
  return a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols && a.block_rows == b.block_rows &&
         a.block_cols == b.block_cols && a.scale_dtype == b.scale_dtype && a.has_scale() == b.has_scale() &&
         std::memcmp(a.data, b.data, a.data_bytes()) == 0 &&
         (!a.has_scale() || std::memcmp(a.scale, b.scale, a.scale_bytes()) == 0);
}

TEST(Int8ExpertTransferTest, MigrationCarriesCodesAndScales) {
  auto config = load_model_config(testing::tiny_model_dir());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const ModelConfig& c = *config;
  auto hf = HfCheckpoint::open(testing::tiny_model_dir());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  const int E = c.router.num_experts;
  const ExpertPlacement current = ExpertPlacement::contiguous(E, 2);  // rank 0: 0..3, rank 1: 4..7
  std::vector<std::vector<int>> slots = {current.experts_on(0), current.experts_on(1)};
  slots[1].push_back(2);
  auto next = ExpertPlacement::from_rank_slots(slots, E);
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  // The expected int8 expert 2 of layer 0, quantised here from the checkpoint.
  auto all = bind_weights(c, hf.value());
  ASSERT_TRUE(all.ok());
  ExpertWeights want = all.value().layers[0].experts[2];
  std::vector<uint8_t> want_buf;
  ASSERT_TRUE(quantize_expert_to_int8(&want, &want_buf));
  ASSERT_EQ(want.w2.dtype, DType::kI8);

  InProcessGroup group(2, 0, 30);
  std::vector<int> ok(2, 0);
  std::vector<MigrationStats> stats(2);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const int r = comm.rank();
    MOE_ASSIGN_OR_RETURN(ModelWeights w, bind_weights(c, hf.value(), [&](int, int e) { return current.holds(r, e); }));
    ExpertStore store;
    for (int e = 0; e < E; ++e) {
      ExpertWeights& ex = w.layers[0].experts[static_cast<size_t>(e)];
      if (ex.loaded) quantize_expert_to_int8(&ex, &store[{0, e}]);
    }
    std::vector<const ExpertPlacement*> cur(static_cast<size_t>(c.num_hidden_layers)), nxt = cur;
    cur[0] = &current;
    nxt[0] = &next.value();
    MOE_RETURN_IF_ERROR(migrate_experts(comm, MigrationPlan{c, {0}, cur, nxt}, MigrationTarget{&w.layers, &store},
                                        &stats[static_cast<size_t>(r)]));
    if (r == 1) {
      const ExpertWeights& got = w.layers[0].experts[2];
      ok[1] = got.loaded && same_bytes(got.w1, want.w1) && same_bytes(got.w2, want.w2) && same_bytes(got.w3, want.w3);
    } else {
      ok[0] = w.layers[0].experts[2].loaded;  // the sender keeps its copy
    }
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(ok, (std::vector<int>{1, 1}));
  EXPECT_EQ(stats[1].bytes_received, static_cast<int64_t>(want.bytes()));
  // int8 codes plus one f32 scale per 32 weights: 1.125 bytes per weight.
  EXPECT_EQ(want.bytes() * 8, static_cast<size_t>(want.w1.rows * want.w1.cols * 3) * 9);
}

// A sender whose header says I8 without the [1, 32] f32 scales of --weights int8 is
// refused by name (rank 0 here speaks the wire protocol by hand: header, payload, sum,
// then the group's verdict).
TEST(Int8ExpertTransferTest, MigrationRefusesI8WithoutItsScales) {
  auto config = load_model_config(testing::tiny_model_dir());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const ModelConfig& c = *config;
  auto hf = HfCheckpoint::open(testing::tiny_model_dir());
  ASSERT_TRUE(hf.ok());
  const int E = c.router.num_experts;
  const ExpertPlacement current = ExpertPlacement::contiguous(E, 2);
  std::vector<std::vector<int>> slots = {current.experts_on(0), current.experts_on(1)};
  slots[1].push_back(2);
  auto next = ExpertPlacement::from_rank_slots(slots, E);
  ASSERT_TRUE(next.ok());
  InProcessGroup group(2, 0, 30);
  Status received = ok_status();
  (void)run_ranks(group, [&](Communicator& comm) -> Status {
    if (comm.rank() == 0) {
      // w1, w2, w3: I8 with f16 scales of blocks [1, 32] (not what --weights int8 writes).
      int64_t header[13];
      for (int i = 0; i < 3; ++i) {
        header[i * 4 + 0] = static_cast<int64_t>(DType::kI8);
        header[i * 4 + 1] = static_cast<int64_t>(DType::kF16);
        header[i * 4 + 2] = 1;
        header[i * 4 + 3] = 32;
      }
      header[12] = 64;
      std::vector<uint8_t> payload(64, 0);
      const uint64_t sum = 0;
      MOE_RETURN_IF_ERROR(comm.send(header, sizeof(header), 1, kMigrationTagHeader));
      MOE_RETURN_IF_ERROR(comm.send(payload.data(), payload.size(), 1, kMigrationTagData));
      MOE_RETURN_IF_ERROR(comm.send(&sum, sizeof(sum), 1, kMigrationTagSum));
      int64_t failed = 0;
      return comm.allreduce_sum(&failed, 1);
    }
    MOE_ASSIGN_OR_RETURN(ModelWeights w, bind_weights(c, hf.value(), [&](int, int e) { return current.holds(1, e); }));
    std::vector<const ExpertPlacement*> cur(static_cast<size_t>(c.num_hidden_layers)), nxt = cur;
    cur[0] = &current;
    nxt[0] = &next.value();
    ExpertStore store;
    MigrationStats stats;
    received = migrate_experts(comm, MigrationPlan{c, {0}, cur, nxt}, MigrationTarget{&w.layers, &store}, &stats);
    return ok_status();
  });
  EXPECT_EQ(received.code(), StatusCode::kDataLoss) << received.to_string();
  EXPECT_NE(received.message().find("I8 without [1, 32] f32 block scales"), std::string::npos) << received.message();
}

}  // namespace
}  // namespace moe
