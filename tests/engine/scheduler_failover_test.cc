// Expert-level failover without a restart (level 1 of docs/reliability.md): three EP ranks as
// threads over the Gloo backend; rank 2 vanishes in the middle of serving (its
// FaultyCommunicator stops taking part, then its sockets close as its thread ends).
// Rank 0 and rank 1 re-form the group and go on: every request in flight completes
// with no error, and its greedy text equals the single-process engine's:
//   - with --min-replicas 2 every expert keeps a live replica (exact throughout);
//   - with one copy per expert, rank 2's experts are lost: with failover_wait 0 tokens go
//     to the next-best live expert (degraded, counted) until the survivors re-load them
//     from the model files, then routing is exact again (a request submitted after that
//     equals the reference); with a wait, the quick re-load is waited for (exact);
//   - a death in the middle of an expert migration keeps the old plan and fails over.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "contains_util.h"
#include "moe/comm/faulty_communicator.h"
#include "moe/comm/gloo_communicator.h"
#include "moe/runtime/expert_migration.h"
#include "moe/scheduler.h"
#include "seq_results.h"
#include "test_util.h"

namespace moe {
namespace {

using Result = testing::SeqResult;
using Results = testing::SeqResults;
using testing::greedy_request;


const char* kPrompts[] = {"ROMEO:", "JULIET:\nO Romeo", "To be, or not to be"};
constexpr int kTokens = 40;

// Single-process greedy tokens of each prompt (the reference).
std::vector<std::vector<int>> reference() {
  EngineOptions opts{.model_dir = testing::tiny_model_dir(), .num_threads = 1};
  auto engine = Engine::open(opts);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  std::vector<std::vector<int>> out;
  for (const char* p : kPrompts) {
    GenerateRequest req;
    req.prompt = p;
    req.max_tokens = kTokens;
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    auto r = engine.value()->generate(req);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    out.push_back(r.ok() ? r.value().output_token_ids : std::vector<int>{});
  }
  return out;
}

struct Outcome {
  std::vector<Result> during;  // requests in flight when rank 2 vanished
  Result after;                // kPrompts[0] again, once no expert is lost
  ServiceSnapshot snap;
  std::vector<std::string> health_states;  // distinct states seen, in order
  Status run = ok_status(), rank1 = ok_status(), rank2 = ok_status();
};

// Rank 2 vanishes after start-up and a few steps' exchanges (80 operations), or as
// `rank2` says; `rebalance_every` > 0 turns live rebalancing on (every expert movable).
// `kv_cache_tokens` > 0: a pool of that many tokens in blocks of 4 (small enough to preempt).
Outcome serve_and_lose_rank2(int min_replicas, FaultPlan rank2 = FaultPlan{.vanish_after_ops = 80},
                             int rebalance_every = 0, double failover_wait = 0, int64_t kv_cache_tokens = 0) {
  Outcome o;
  const std::string dir = testing::make_temp_dir("gloo_failover");
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions go;
      go.store_dir = dir;
      go.timeout_seconds = 10;
      auto comm = GlooCommunicator::create(rank, 3, go);
      if (!comm.ok()) {
        (rank == 0 ? o.run : rank == 1 ? o.rank1 : o.rank2) = comm.status();
        return;
      }
      FaultyCommunicator faulty(*comm.value(), rank == 2 ? rank2 : FaultPlan{});
      Communicator& c = rank == 2 ? static_cast<Communicator&>(faulty) : *comm.value();
      EngineOptions opts{.model_dir = testing::tiny_model_dir(), .num_threads = 1, .comm = &c,
                         .comm_timeout_seconds = 2};
      opts.min_replicas = min_replicas;
      opts.failover_wait_seconds = failover_wait;
      if (rebalance_every > 0) {
        opts.rebalance_every = rebalance_every;
        opts.rebalance_min_gain = 0;  // adopt every plan: experts move
        opts.slots_per_rank = 6;
      }
      auto engine = Engine::open(opts);
      if (!engine.ok()) {
        (rank == 0 ? o.run : rank == 1 ? o.rank1 : o.rank2) = engine.status();
        return;
      }
      if (rank != 0) {
        (rank == 1 ? o.rank1 : o.rank2) = engine.value()->run_worker();
        return;  // rank 2: its engine, then its sockets, close here
      }
      SchedulerOptions so;
      so.max_num_seqs = 4;
      so.idle_heartbeat_seconds = 0.5;
      so.liveness_timeout_seconds = 30;
      if (kv_cache_tokens > 0) {
        so.kv_block_size = 4;
        so.kv_cache_tokens = kv_cache_tokens;
      }
      auto sched = Scheduler::create(engine.value().get(), so);
      if (!sched.ok()) {
        o.run = sched.status();
        return;
      }
      Scheduler& s = *sched.value();
      std::thread client([&] {
        Results r;
        for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.submit(greedy_request(kPrompts[i], kTokens), r.sink(i)).ok());
        for (int i = 0; i < 3; ++i) o.during.push_back(r.wait(i));
        for (int i = 0; i < 2000; ++i) {  // bounded: re-replication ends within a few checks
          const ServiceHealth h = s.health();
          if (o.health_states.empty() || o.health_states.back() != h.state) o.health_states.push_back(h.state);
          if (s.snapshot().failovers > 0 && s.snapshot().lost_experts == 0) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        EXPECT_TRUE(s.submit(greedy_request(kPrompts[0], kTokens), r.sink(9)).ok());
        o.after = r.wait(9);
        o.snap = s.snapshot();
        s.shutdown(0);
      });
      o.run = s.run();
      client.join();
      if (o.run.ok()) o.run = engine.value()->stop_workers();
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  return o;
}

TEST(SchedulerFailover, ReplicasOnSurvivorsKeepEveryRequestExact) {
  const auto ref = reference();
  const Outcome o = serve_and_lose_rank2(/*min_replicas=*/2);
  EXPECT_TRUE(o.run.ok()) << o.run.to_string();
  EXPECT_TRUE(o.rank1.ok()) << o.rank1.to_string();
  EXPECT_FALSE(o.rank2.ok());  // the vanished rank
  ASSERT_EQ(o.during.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(o.during[static_cast<size_t>(i)].finish_reason, "length") << o.during[static_cast<size_t>(i)].error;
    EXPECT_EQ(o.during[static_cast<size_t>(i)].tokens, ref[static_cast<size_t>(i)]) << kPrompts[i];
  }
  EXPECT_EQ(o.after.tokens, ref[0]);
  EXPECT_EQ(o.snap.failovers, 1);
  EXPECT_EQ(o.snap.ranks_lost, 1);
  EXPECT_EQ(o.snap.lost_experts, 0);
  EXPECT_EQ(o.snap.degraded_tokens, 0);  // every expert had a replica on a survivor
  ASSERT_EQ(o.snap.failover_seconds.size(), 1u);
  EXPECT_GT(o.snap.failover_seconds[0], 0);
}

// Sequences preempted (a pool of 14 blocks for three that grow to 11-13) while rank 2
// dies: every request still ends exact.
TEST(SchedulerFailover, PreemptionAcrossAFailoverStaysExact) {
  const auto ref = reference();
  const Outcome o = serve_and_lose_rank2(/*min_replicas=*/2, FaultPlan{.vanish_after_ops = 80}, 0, 0,
                                         /*kv_cache_tokens=*/56);
  EXPECT_TRUE(o.run.ok()) << o.run.to_string();
  ASSERT_EQ(o.during.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(o.during[static_cast<size_t>(i)].finish_reason, "length") << o.during[static_cast<size_t>(i)].error;
    EXPECT_EQ(o.during[static_cast<size_t>(i)].tokens, ref[static_cast<size_t>(i)]) << kPrompts[i];
  }
  EXPECT_EQ(o.after.tokens, ref[0]);
  EXPECT_EQ(o.snap.failovers, 1);
  EXPECT_GT(o.snap.preemptions, 0);
}

TEST(SchedulerFailover, LostExpertsAreReroutedThenReReplicated) {
  const auto ref = reference();
  const Outcome o = serve_and_lose_rank2(/*min_replicas=*/1);
  EXPECT_TRUE(o.run.ok()) << o.run.to_string();
  EXPECT_TRUE(o.rank1.ok()) << o.rank1.to_string();
  ASSERT_EQ(o.during.size(), 3u);
  for (const Result& r : o.during) {
    EXPECT_EQ(r.finish_reason, "length") << r.error;  // none lost, none errored
    EXPECT_EQ(r.tokens.size(), static_cast<size_t>(kTokens));
  }
  EXPECT_EQ(o.snap.failovers, 1);
  EXPECT_EQ(o.snap.ranks_lost, 1);
  EXPECT_GT(o.snap.degraded_tokens, 0);  // the retried step ran with rank 2's experts lost
  EXPECT_EQ(o.snap.lost_experts, 0);     // re-replicated since
  EXPECT_EQ(o.after.tokens, ref[0]);     // exact again
}

// The same loss with --failover-wait 5: re-loading the lost experts from the model files
// takes milliseconds, so the survivors wait for it and never serve degraded: every
// request in flight stays exact.
TEST(SchedulerFailover, QuickReloadIsWaitedForAndStaysExact) {
  const auto ref = reference();
  const Outcome o = serve_and_lose_rank2(/*min_replicas=*/1, FaultPlan{.vanish_after_ops = 80}, 0,
                                         /*failover_wait=*/5);
  EXPECT_TRUE(o.run.ok()) << o.run.to_string();
  ASSERT_EQ(o.during.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(o.during[static_cast<size_t>(i)].tokens, ref[static_cast<size_t>(i)]) << kPrompts[i];
  }
  EXPECT_EQ(o.snap.failovers, 1);
  EXPECT_EQ(o.snap.degraded_tokens, 0);
  EXPECT_EQ(o.snap.lost_experts, 0);
}

// Rank 2 dies in the middle of a live rebalancing's expert migration (at its first
// transfer): the migration fails on every survivor without a hang, the old placement stays
// in force, the survivors re-form with it and every request completes exactly.
TEST(SchedulerFailover, DeathDuringAMigrationKeepsTheOldPlanAndFailsOver) {
  const auto ref = reference();
  FaultPlan in_migration;
  in_migration.vanish_on_tag = kMigrationTagHeader;
  const Outcome o = serve_and_lose_rank2(/*min_replicas=*/2, in_migration, /*rebalance_every=*/2);
  EXPECT_TRUE(o.run.ok()) << o.run.to_string();
  EXPECT_TRUE(o.rank1.ok()) << o.rank1.to_string();
  EXPECT_CONTAINS(o.rank2.message(), "is gone");  // it did vanish, in a migration
  ASSERT_EQ(o.during.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(o.during[static_cast<size_t>(i)].finish_reason, "length") << o.during[static_cast<size_t>(i)].error;
    EXPECT_EQ(o.during[static_cast<size_t>(i)].tokens, ref[static_cast<size_t>(i)]) << kPrompts[i];
  }
  EXPECT_EQ(o.snap.failovers, 1);
  EXPECT_EQ(o.snap.ranks_lost, 1);
  EXPECT_EQ(o.after.tokens, ref[0]);
}

}  // namespace
}  // namespace moe
