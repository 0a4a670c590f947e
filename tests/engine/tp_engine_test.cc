// The Engine under tensor parallelism on an in-process group (one thread per rank):
// generate() and the Scheduler's batched steps (the paged KV pool, mirrored by the TP
// followers) give the single-process tokens, for pure TP and for hybrid TP x EP (fused
// and not); Engine::open's refusals name the option (--tp / --ep, the config.json field).
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

#include "contains_util.h"
#include "fp8_model_util.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/engine.h"
#include "moe/scheduler.h"
#include "seq_results.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::greedy_request;

const std::string kDeepseek = testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare";
const std::vector<std::string> kPrompts = {"ROMEO:", "JULIET:\nO Romeo, Romeo", "To be, or not to be"};
constexpr int kTokens = 6;

EngineOptions base_options(const std::string& model) {
  return EngineOptions{.model_dir = model, .num_threads = 1};
}

// Greedy tokens of each prompt from a Scheduler over `engine` (rank 0).
StatusOr<std::vector<std::vector<int>>> schedule(Engine& engine) {
  MOE_ASSIGN_OR_RETURN(auto sched, Scheduler::create(&engine, SchedulerOptions{.max_num_seqs = 4}));
  testing::SeqResults results;
  std::vector<std::vector<int>> out;
  std::thread client([&] {
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      EXPECT_TRUE(sched->submit(greedy_request(kPrompts[i], kTokens), results.sink(static_cast<int>(i))).ok());
    }
    for (size_t i = 0; i < kPrompts.size(); ++i) out.push_back(results.wait(static_cast<int>(i)).tokens);
    sched->shutdown(0);
  });
  Status run = sched->run();
  client.join();
  MOE_RETURN_IF_ERROR(run);
  return out;
}

StatusOr<std::vector<int>> generate(Engine& engine) {
  GenerateRequest req;
  req.prompt = kPrompts[1];
  req.max_tokens = kTokens;
  req.sampling.temperature = 0;
  req.ignore_eos = true;
  MOE_ASSIGN_OR_RETURN(GenerateResult r, engine.generate(req));
  return r.output_token_ids;
}

struct Tokens {
  std::vector<int> generated;
  std::vector<std::vector<int>> scheduled;
};

Tokens run_single(const std::string& model) {
  Tokens t;
  auto engine = Engine::open(base_options(model));
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return t;
  auto g = generate(*engine.value());
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (g.ok()) t.generated = *g;
  auto s = schedule(*engine.value());
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (s.ok()) t.scheduled = *s;
  return t;
}

// Every rank opens the engine with `options` (tp/ep/fused set); rank 0 generates, then
// schedules, then stops the workers.
Status run_group(int ranks, int ranks_per_node, const EngineOptions& options, Tokens* out) {
  InProcessGroup group(ranks, ranks_per_node, /*timeout_seconds=*/30);
  return run_ranks(group, [&](Communicator& comm) -> Status {
    EngineOptions o = options;
    o.comm = &comm;
    MOE_ASSIGN_OR_RETURN(auto engine, Engine::open(o));
    if (comm.rank() != 0) return engine->run_worker();
    auto g = generate(*engine);
    auto s = g.ok() ? schedule(*engine) : StatusOr<std::vector<std::vector<int>>>(g.status());
    MOE_RETURN_IF_ERROR(engine->stop_workers());
    MOE_RETURN_IF_ERROR(g.status());
    MOE_RETURN_IF_ERROR(s.status());
    out->generated = *g;
    out->scheduled = *s;
    return ok_status();
  });
}

struct Case {
  std::string name;
  int ranks, ranks_per_node, tp, ep;
  bool fused = true;
  bool deepseek = false;
};

class TpEngineTest : public ::testing::TestWithParam<Case> {};

TEST_P(TpEngineTest, SameTokensAsOneProcess) {
  const Case& c = GetParam();
  const std::string model = c.deepseek ? kDeepseek : testing::tiny_model_dir();
  const Tokens single = run_single(model);
  ASSERT_EQ(single.scheduled.size(), kPrompts.size());
  EngineOptions o = base_options(model);
  o.tp_size = c.tp;
  o.ep_size = c.ep;
  o.fused_moe = c.fused;
  Tokens tp;
  const Status st = run_group(c.ranks, c.ranks_per_node, o, &tp);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(tp.generated, single.generated);
  EXPECT_EQ(tp.scheduled, single.scheduled);
}

INSTANTIATE_TEST_SUITE_P(Strategies, TpEngineTest,
                         ::testing::Values(Case{"tp2", 2, 0, 2, 0}, Case{"tp2_deepseek_v3", 2, 0, 2, 0, true, true},
                                           Case{"tp2_ep2_fused", 4, 2, 2, 2, true},
                                           Case{"tp2_ep2_unfused", 4, 2, 2, 2, false},
                                           Case{"tp2_ep2_fused_deepseek_v3", 4, 2, 2, 2, true, true}),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// An FP8 checkpoint (blocks of 32 x 32, so every row-parallel slice is whole blocks):
// each rank shards the FP8 weights (with their scale columns), then dequantises only its
// shard (dequant) or runs the FP8 kernels on it (native); greedy tokens as one process.
TEST(TpEngineFp8, ShardsThenDequantisesOrRunsNative) {
  testing::ScopedTempDir tmp("tp_fp8");
  testing::make_fp8_model(testing::tiny_model_dir(), tmp.file("fp8"), 32, 32, "");
  for (Fp8Mode mode : {Fp8Mode::kDequant, Fp8Mode::kNative}) {
    SCOPED_TRACE(mode == Fp8Mode::kDequant ? "dequant" : "native");
    EngineOptions o = base_options(tmp.file("fp8"));
    o.fp8_mode = mode;
    auto one = Engine::open(o);
    ASSERT_TRUE(one.ok()) << one.status().to_string();
    auto want = generate(*one.value());
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    o.tp_size = 2;
    InProcessGroup group(2, 0, 30);
    std::vector<int> got;
    const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
      EngineOptions ro = o;
      ro.comm = &comm;
      MOE_ASSIGN_OR_RETURN(auto engine, Engine::open(ro));
      if (comm.rank() != 0) return engine->run_worker();
      auto g = generate(*engine);
      MOE_RETURN_IF_ERROR(engine->stop_workers());
      MOE_RETURN_IF_ERROR(g.status());
      got = *g;
      return ok_status();
    });
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(got, *want);
  }
}

// Engine::open on every rank of a group of `ranks`; the first error (they agree).
Status open_group(int ranks, int ranks_per_node, const EngineOptions& options) {
  InProcessGroup group(ranks, ranks_per_node, /*timeout_seconds=*/10);
  return run_ranks(group, [&](Communicator& comm) -> Status {
    EngineOptions o = options;
    o.comm = &comm;
    MOE_ASSIGN_OR_RETURN(auto engine, Engine::open(o));
    if (comm.rank() != 0) return engine->run_worker();
    return engine->stop_workers();
  });
}

TEST(TpEngineErrors, EachNamesTheOption) {
  EngineOptions o = base_options(testing::tiny_model_dir());
  o.tp_size = 2;
  auto alone = Engine::open(o);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(alone.status().message(), "--tp 2 needs 2 ranks");

  o.ep_size = 3;
  Status st = open_group(4, 0, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_CONTAINS(st.message(), "--tp 2 x --ep 3 = 6 ranks, but the world has 4");

  o.ep_size = 2;  // nodes of one rank: each TP group spans two
  st = open_group(4, 1, o);
  EXPECT_CONTAINS(st.message(), "a TP group must lie inside one node");

  o.ep_size = 0;
  o.tp_size = 4;  // the tiny Mixtral has 2 key/value heads
  st = open_group(4, 0, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_CONTAINS(st.message(), "num_key_value_heads");
  EXPECT_CONTAINS(st.message(), "--tp 4");

  o.tp_size = 0;
  EXPECT_CONTAINS(Engine::open(o).status().message(), "--tp must be >= 1 (got 0)");

  o.tp_size = 2;
  o.ep_size = 2;
  o.a2a_hierarchical = 1;  // the fused path's EP group has one rank per node
  st = open_group(4, 2, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_CONTAINS(st.message(), "--a2a-mode hierarchical with --tp 2 --fused-moe on");
  o.a2a_hierarchical = -1;
  o.ep_size = 0;

  o.rebalance_every = 4;
  EXPECT_CONTAINS(open_group(2, 0, o).message(), "--rebalance-every is not supported with --tp 2");
  o.rebalance_every = 0;
  o.min_replicas = 2;
  EXPECT_CONTAINS(open_group(2, 0, o).message(), "--min-replicas > 1 is not supported with --tp 2");
  o.min_replicas = 1;
  o.placement_file = "plan.json";
  EXPECT_CONTAINS(open_group(2, 0, o).message(), "--placement is not supported with --tp 2");
}

}  // namespace
}  // namespace moe
