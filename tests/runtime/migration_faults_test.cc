// A corrupted expert migration keeps the old placement (regression test for the
// `--test-corrupt-migration-rank` CLI hook it replaces): under in-process EP with live
// rebalancing every step, rank 1's communicator flips a byte of the first expert it
// receives (FaultyCommunicator). The checksum check fails on rank 1, every rank keeps
// the previous placement, generation goes on, and the greedy tokens equal a run that
// never rebalances. The migration alone: a checksum mismatch fails every rank and changes
// nothing.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "moe/comm/faulty_communicator.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/engine.h"
#include "moe/model/config.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/weights.h"
#include "moe/placement/expert_placement.h"
#include "moe/runtime/expert_migration.h"
#include "contains_util.h"
#include "test_util.h"

namespace moe {
namespace {

const char* kPrompt = "KING HENRY IV:\nSo shaken as we are, so wan with care,";

struct EpRun {
  std::vector<int> tokens;
  Engine::EpStats stats;
};

EpRun generate_ep2(bool rebalance, const FaultPlan& rank1_faults) {
  InProcessGroup group(2, 0, 60);
  std::vector<std::unique_ptr<FaultyCommunicator>> comms;
  comms.push_back(std::make_unique<FaultyCommunicator>(group.rank(0), FaultPlan{}));
  comms.push_back(std::make_unique<FaultyCommunicator>(group.rank(1), rank1_faults));
  EpRun out;
  Status st = run_ranks(group, [&](Communicator& inner) -> Status {
    Communicator& comm = *comms[static_cast<size_t>(inner.rank())];
    EngineOptions opts{.model_dir = testing::tiny_model_dir(), .num_threads = 1, .comm = &comm};
    if (rebalance) {
      opts.rebalance_every = 1;
      opts.rebalance_min_gain = 0;
      opts.slots_per_rank = 6;
    }
    MOE_ASSIGN_OR_RETURN(auto engine, Engine::open(opts));
    if (comm.rank() != 0) return engine->run_worker();
    GenerateRequest req{.prompt = kPrompt, .max_tokens = 16};
    req.sampling.temperature = 0;
    MOE_ASSIGN_OR_RETURN(GenerateResult r, engine->generate(req));
    out.tokens = r.output_token_ids;
    out.stats = engine->ep_stats();
    return engine->stop_workers();
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(comms[1]->counts().corrupted, rank1_faults.corrupt_recv_tag >= 0 ? 1 : 0);
  return out;
}

TEST(MigrationFaults, CorruptedMigrationKeepsTheOldPlanAndTheTokens) {
  const EpRun never = generate_ep2(false, {});
  ASSERT_EQ(never.tokens.size(), 16u);
  FaultPlan corrupt;
  corrupt.corrupt_recv_tag = kMigrationTagData;
  const EpRun corrupted = generate_ep2(true, corrupt);
  EXPECT_EQ(corrupted.tokens, never.tokens);
  EXPECT_GE(corrupted.stats.rebalance_failures, 1);  // the corrupted one failed ...
  EXPECT_GE(corrupted.stats.rebalances, 1);          // ... later ones went through
  const EpRun clean = generate_ep2(true, {});
  EXPECT_EQ(clean.tokens, never.tokens);
  EXPECT_EQ(clean.stats.rebalance_failures, 0);
  EXPECT_GE(clean.stats.experts_moved, 1);
}

// The migration itself: expert 2 of layer 0 moves from rank 0 to rank 1; rank 1's
// received bytes are corrupted. Rank 1 fails with DataLoss naming the checksum, rank 0
// with the count of failed ranks, and nothing changes on either rank.
TEST(MigrationFaults, ChecksumMismatchFailsEveryRankAndChangesNothing) {
  auto config = load_model_config(testing::tiny_model_dir());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto ckpt = HfCheckpoint::open(testing::tiny_model_dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  const int E = config->router.num_experts;
  const ExpertPlacement current = ExpertPlacement::contiguous(E, 2);
  std::vector<std::vector<int>> slots = {current.experts_on(0), current.experts_on(1)};
  slots[1].push_back(2);  // a replica of expert 2 on rank 1
  auto next = ExpertPlacement::from_rank_slots(slots, E);
  ASSERT_TRUE(next.ok()) << next.status().to_string();

  InProcessGroup group(2, 0, 30);
  FaultPlan corrupt;
  corrupt.corrupt_recv_tag = kMigrationTagData;
  FaultyCommunicator rank1(group.rank(1), corrupt);
  std::vector<Status> results(2);
  std::vector<bool> loaded_after(2, false), store_empty(2, false);
  (void)run_ranks(group, [&](Communicator& inner) -> Status {
    const int r = inner.rank();
    Communicator& comm = r == 1 ? static_cast<Communicator&>(rank1) : inner;
    MOE_ASSIGN_OR_RETURN(ModelWeights w, bind_weights(*config, *ckpt, [&](int, int e) { return current.holds(r, e); }));
    const std::vector<int> moe_layers = {0};
    std::vector<const ExpertPlacement*> cur(static_cast<size_t>(config->num_hidden_layers), nullptr), nxt = cur;
    cur[0] = &current;
    nxt[0] = &next.value();
    ExpertStore store;
    MigrationStats stats;
    results[static_cast<size_t>(r)] =
        migrate_experts(comm, MigrationPlan{*config, moe_layers, cur, nxt}, MigrationTarget{&w.layers, &store}, &stats);
    loaded_after[static_cast<size_t>(r)] = w.layers[0].experts[2].loaded;
    store_empty[static_cast<size_t>(r)] = store.empty();
    return ok_status();
  });
  EXPECT_EQ(results[1].code(), StatusCode::kDataLoss) << results[1].to_string();
  EXPECT_CONTAINS(results[1].message(), "checksum mismatch");
  EXPECT_CONTAINS(results[1].message(), "expert 2");
  EXPECT_FALSE(results[0].ok());
  EXPECT_CONTAINS(results[0].message(), "failed on 1 rank(s)");
  EXPECT_CONTAINS(results[0].message(), "previous placement stays in force");
  EXPECT_EQ(loaded_after, (std::vector<bool>{true, false}));  // rank 1 did not take the bad copy
  EXPECT_EQ(store_empty, (std::vector<bool>{true, true}));
  EXPECT_EQ(rank1.counts().corrupted, 1);
}

}  // namespace
}  // namespace moe
