// A corrupted expert migration keeps the old placement (regression test for the
// `--test-corrupt-migration-rank` CLI hook it replaces): under in-process EP with live
// rebalancing every step, rank 1's communicator flips a byte of the first expert it
// receives (FaultyCommunicator). The checksum check fails on rank 1, every rank keeps
// the previous placement, generation goes on, and the greedy tokens equal a run that
// never rebalances.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "moe/comm/faulty_communicator.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/engine.h"
#include "test_util.h"

namespace moe {
namespace {

constexpr int kMigrationDataTag = 7102;  // src/moe/runtime/expert_migration.cc: the expert bytes
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
  corrupt.corrupt_recv_tag = kMigrationDataTag;
  const EpRun corrupted = generate_ep2(true, corrupt);
  EXPECT_EQ(corrupted.tokens, never.tokens);
  EXPECT_GE(corrupted.stats.rebalance_failures, 1);  // the corrupted one failed ...
  EXPECT_GE(corrupted.stats.rebalances, 1);          // ... later ones went through
  const EpRun clean = generate_ep2(true, {});
  EXPECT_EQ(clean.tokens, never.tokens);
  EXPECT_EQ(clean.stats.rebalance_failures, 0);
  EXPECT_GE(clean.stats.experts_moved, 1);
}

}  // namespace
}  // namespace moe
