// runtime/failover: after the group re-formed, the survivors' placement (lost experts),
// the background re-replication and its collective switch, a failed load (stays
// degraded), and the synchronous path when too few experts are alive to route at all.
// One MoE layer of 4 experts; expert loads are fakes that record what they were asked.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <mutex>
#include <set>
#include <vector>

#include "moe/comm/inproc_communicator.h"
#include "moe/runtime/failover.h"

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

ModelConfig one_moe_layer(int top_k) {
  ModelConfig c;
  c.num_hidden_layers = 1;
  c.moe_layer = {true};
  c.router.num_experts = 4;
  c.router.top_k = top_k;
  return c;
}

struct Rank {
  std::vector<EpContext> ep;
  std::vector<LayerWeights> layers;
  ExpertStore store;
  std::set<std::pair<int, int>> loaded;  // what the fake loader was asked for
  std::mutex mu;

  Rank(Communicator* comm, const ExpertPlacement& placement) {
    EpContext ctx;
    ctx.comm = comm;
    ctx.placement = placement;
    ep.assign(1, ctx);
    layers.resize(1);
    layers[0].experts.assign(4, ExpertWeights{});
    for (int e : placement.experts_on(comm->rank())) layers[0].experts[static_cast<size_t>(e)].loaded = true;
  }
  FailoverInputs inputs(Communicator* comm, const ModelConfig* config, bool fail_loads) {
    FailoverInputs in{.comm = comm, .config = config, .ep = &ep, .layers = &layers, .expert_store = &store,
                      .slots_per_rank = 2, .wait_seconds = 0, .load_expert = {}};
    in.load_expert = [this, fail_loads](int l, int e, std::vector<LayerWeights>* stage, ExpertStore* s) -> Status {
      if (fail_loads) return data_loss("shard of layer " + std::to_string(l) + ", expert " + std::to_string(e) + " is corrupt");
      std::lock_guard<std::mutex> lock(mu);
      loaded.insert({l, e});
      (*s)[{l, e}] = std::vector<uint8_t>(16, static_cast<uint8_t>(e));
      ExpertWeights& w = (*stage)[static_cast<size_t>(l)].experts[static_cast<size_t>(e)];
      w.w1 = Weight2D{(*s)[{l, e}].data(), DType::kF32, 2, 2};
      w.loaded = true;
      return ok_status();
    };
    return in;
  }
};

ExpertPlacement placement(const std::vector<std::vector<int>>& slots) {
  auto p = ExpertPlacement::from_rank_slots(slots, 4);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.value();
}

// Old ranks {0: experts 0,1; 1: expert 2; 2: expert 3}; rank 2 dies. Expert 3 is lost,
// re-replicated onto new rank 1 (the one with a free slot) in the background; both
// ranks switch together once it is loaded, and the loaded weights are bound.
TEST(Failover, LostExpertIsReReplicatedThenSwitchedTogether) {
  const ModelConfig config = one_moe_layer(1);
  InProcessGroup group(2, 0, 10);
  std::vector<ExpertPlacement> after(2);
  std::vector<FailoverStats> stats(2);
  std::vector<std::set<std::pair<int, int>>> asked(2);
  std::vector<bool> weight_bound(2);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    Rank r(&comm, placement({{0, 1}, {2}, {3}}));
    Failover f(r.inputs(&comm, &config, false));
    MOE_RETURN_IF_ERROR(f.on_group_shrunk({0, 1}));
    EXPECT_TRUE(f.pending());
    EXPECT_TRUE(f.degraded());
    EXPECT_EQ(f.lost_now(), 1);
    EXPECT_TRUE(r.ep[0].placement.is_lost(3));
    MOE_RETURN_IF_ERROR(switch_when_ready(f));
    EXPECT_FALSE(f.pending());
    const size_t me = static_cast<size_t>(comm.rank());
    after[me] = r.ep[0].placement;
    stats[me] = f.stats();
    asked[me] = r.loaded;
    weight_bound[me] = r.layers[0].experts[3].loaded && r.store.count({0, 3}) == 1 &&
                       r.layers[0].experts[3].w1.data == r.store[{0, 3}].data();
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(after[0], after[1]);
  EXPECT_EQ(after[0], placement({{0, 1}, {2, 3}}));
  EXPECT_TRUE(asked[0].empty());
  EXPECT_EQ(asked[1], (std::set<std::pair<int, int>>{{0, 3}}));
  EXPECT_FALSE(weight_bound[0]);
  EXPECT_TRUE(weight_bound[1]);
  for (const FailoverStats& s : stats) {
    EXPECT_EQ(s.group_changes, 1);
    EXPECT_EQ(s.experts_lost, 1);
    EXPECT_EQ(s.experts_rereplicated, 1);
    EXPECT_EQ(s.rereplication_failures, 0);
  }
}

// A load that fails (a corrupt shard) abandons the re-replication on every rank: the
// expert stays lost (degraded), nothing is bound.
TEST(Failover, FailedLoadStaysDegradedOnEveryRank) {
  const ModelConfig config = one_moe_layer(1);
  InProcessGroup group(2, 0, 10);
  std::vector<int64_t> lost(2), failures(2);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    Rank r(&comm, placement({{0, 1}, {2}, {3}}));
    Failover f(r.inputs(&comm, &config, /*fail_loads=*/true));
    MOE_RETURN_IF_ERROR(f.on_group_shrunk({0, 1}));
    MOE_RETURN_IF_ERROR(switch_when_ready(f));
    EXPECT_FALSE(f.pending());
    EXPECT_TRUE(f.degraded());
    EXPECT_FALSE(r.layers[0].experts[3].loaded);
    lost[static_cast<size_t>(comm.rank())] = f.lost_now();
    failures[static_cast<size_t>(comm.rank())] = f.stats().rereplication_failures;
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(lost, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(failures, (std::vector<int64_t>{1, 1}));
}

// Rank 0 alone survives with one live expert for a top-2 router: it cannot route, so
// on_group_shrunk waits for the loads and switches before returning.
TEST(Failover, TooFewLiveExpertsReReplicatesBeforeReturning) {
  const ModelConfig config = one_moe_layer(2);
  InProcessGroup group(1, 0, 10);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    Rank r(&comm, placement({{0}, {1, 2, 3}}));
    Failover f(r.inputs(&comm, &config, false));
    MOE_RETURN_IF_ERROR(f.on_group_shrunk({0}));
    EXPECT_FALSE(f.pending());
    EXPECT_FALSE(f.degraded());
    EXPECT_EQ(r.ep[0].placement, placement({{0, 1, 2, 3}}));
    for (int e = 0; e < 4; ++e) EXPECT_TRUE(r.layers[0].experts[static_cast<size_t>(e)].loaded) << e;
    EXPECT_EQ(f.stats().experts_rereplicated, 3);
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
}

TEST(Failover, BadSurvivorListIsRefused) {
  const ModelConfig config = one_moe_layer(1);
  InProcessGroup group(1, 0, 10);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    Rank r(&comm, placement({{0, 1}, {2, 3}}));
    Failover f(r.inputs(&comm, &config, false));
    const Status bad = f.on_group_shrunk({1, 0});
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.to_string();
    EXPECT_EQ(r.ep[0].placement, placement({{0, 1}, {2, 3}}));  // unchanged
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
}

}  // namespace
}  // namespace moe
