// The expert-parallel MoE layer in degraded mode: a placement with lost experts (no
// live replica) over 2-3 in-process ranks gives exactly the single-process moe_forward
// of the same global batch routed with the lost experts masked (the reference runs the
// router's mask in one process), for the flat, overlapped and hierarchical exchanges,
// with replicas and with the reroute capacity policy. The degraded counts equal an
// independent count (tokens whose unmasked top-k holds a lost expert) and are equal on
// every rank. Fewer live experts than top_k fails every rank with FailedPrecondition
// before any exchange; a hand-made routing to a lost expert fails every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>

#include "moe/comm/inproc_communicator.h"
#include "moe/moe/ep_moe_layer.h"
#include "tiny_ep_layer.h"
#include "moe/moe/moe_layer.h"
#include "moe/ops/linear.h"

namespace moe {
namespace {

constexpr int kHidden = testing::kTinyHidden, kExperts = testing::kTinyExperts,
              kTopK = testing::kTinyTopK;

struct TinyLayer : testing::TinyEpLayer {
  TinyLayer() : TinyEpLayer(11, /*router_scale=*/3.0f) {}
};

std::vector<float> rank_tokens(int rank, int n) {
  std::mt19937 rng(500 + rank);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * kHidden) + 1);
  for (auto& v : x) v = dist(rng);
  return x;
}

// Tokens of `x` [n, hidden] whose top-k with every expert alive holds a lost expert,
// and per expert how many wanted it: from the plain router, independently of the
// degraded counting.
void count_unmasked(const TinyLayer& tiny, const ExpertPlacement& p, const float* x, int n, int64_t* tokens,
                    std::vector<int64_t>* per_expert) {
  std::vector<float> logits(static_cast<size_t>(n * kExperts) + 1), w(static_cast<size_t>(n * kTopK) + 1);
  std::vector<int> idx(static_cast<size_t>(n * kTopK) + 1);
  if (n == 0) return;
  linear(x, n, tiny.layer.router, logits.data(), KernelOptions{});
  route_topk(tiny.config.router, {logits.data()}, {idx.data(), w.data(), n, kTopK});
  for (int t = 0; t < n; ++t) {
    bool hit = false;
    for (int j = 0; j < kTopK; ++j) {
      const int e = idx[static_cast<size_t>(t * kTopK + j)];
      if (p.is_lost(e)) {
        hit = true;
        ++(*per_expert)[static_cast<size_t>(e)];
      }
    }
    *tokens += hit;
  }
}

struct Setup {
  int ranks = 3;
  std::vector<int> counts;  // tokens per rank
  std::vector<std::vector<int>> slots;
  EpOptions options;
  int ranks_per_node = 0;
};

void check_degraded(const Setup& s) {
  TinyLayer tiny;
  const ExpertPlacement placement = ExpertPlacement::from_rank_slots(s.slots, kExperts, LostExperts::kAllow).value();
  ASSERT_GT(placement.num_lost(), 0);
  // The single-process reference: the global batch (rank-major, as the capacity policy
  // orders it) through moe_forward with the lost experts masked.
  int total = 0;
  for (int c : s.counts) total += c;
  std::vector<float> all_x;
  std::vector<int> offset;
  int64_t want_degraded = 0;
  std::vector<int64_t> want_per_expert(kExperts, 0);
  for (int r = 0; r < s.ranks; ++r) {
    const int n = s.counts[static_cast<size_t>(r)];
    const std::vector<float> x = rank_tokens(r, n);
    offset.push_back(static_cast<int>(all_x.size() / kHidden));
    all_x.insert(all_x.end(), x.begin(), x.begin() + n * kHidden);
    count_unmasked(tiny, placement, x.data(), n, &want_degraded, &want_per_expert);
  }
  ASSERT_GT(want_degraded, 0) << "the test needs tokens that want a lost expert";
  std::vector<float> ref(static_cast<size_t>(total * kHidden) + 1);
  MoeWorkspace mws;
  const std::vector<uint8_t> alive = placement.alive_mask();
  moe_forward(MoeLayerArgs::f32(tiny.config, tiny.layer, all_x.data(), total, ref.data()), &mws, s.options.capacity,
              alive.data());
  for (int e : placement.lost_experts()) EXPECT_EQ(mws.counts.tokens_per_expert[static_cast<size_t>(e)], 0);
  EXPECT_EQ(mws.counts.degraded_tokens, want_degraded);
  EXPECT_EQ(mws.counts.degraded_per_expert, want_per_expert);

  std::vector<StepRoutingCounts> got(static_cast<size_t>(s.ranks));
  std::mutex mu;
  InProcessGroup group(s.ranks, s.ranks_per_node, 20);
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const int r = comm.rank(), n = s.counts[static_cast<size_t>(r)];
    const std::vector<float> x = rank_tokens(r, n);
    EpContext ctx{&comm, placement, s.options, 3};
    LayerWeights mine = tiny.layer;  // only this rank's experts: a wrong dispatch fails
    for (int e = 0; e < kExperts; ++e) mine.experts[static_cast<size_t>(e)].loaded = placement.holds(r, e);
    auto ws = make_ep_workspace(tiny.config, ctx, n);
    std::vector<float> out(static_cast<size_t>(n * kHidden) + 1);
    for (int step = 0; step < 2; ++step) {  // twice: the workspace is reused
      MOE_RETURN_IF_ERROR(ep_moe_forward(MoeLayerArgs::f32(tiny.config, mine, x.data(), n, out.data()), ctx, ws.get()));
      for (int i = 0; i < n * kHidden; ++i) {
        const float want = ref[static_cast<size_t>(offset[static_cast<size_t>(r)] * kHidden + i)];
        if (std::fabs(out[static_cast<size_t>(i)] - want) > 1e-5f * (1 + std::fabs(want))) {
          return internal_error("rank " + std::to_string(r) + " element " + std::to_string(i) + ": " +
                                std::to_string(out[static_cast<size_t>(i)]) + " vs " + std::to_string(want));
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    got[static_cast<size_t>(r)] = ep_last_routing_counts(*ws);
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int r = 0; r < s.ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const StepRoutingCounts& c = got[static_cast<size_t>(r)];
    EXPECT_EQ(c.degraded_tokens, want_degraded);
    EXPECT_EQ(c.degraded_per_expert, want_per_expert);
    EXPECT_EQ(c.tokens_per_expert, mws.counts.tokens_per_expert);
    EXPECT_EQ(c.rerouted, mws.counts.rerouted);
    EXPECT_EQ(c.dropped, mws.counts.dropped);
  }
}

// Expert 5 lost (its only rank died), 2 lost too on the replicated layout.
const std::vector<std::vector<int>> kOneLost = {{0, 1, 2}, {3, 4}, {6, 7}};
const std::vector<std::vector<int>> kTwoLostReplicated = {{0, 1, 7}, {3, 4, 7}, {1, 6}};

TEST(EpDegraded, FlatThreeRanks) { check_degraded({3, {9, 0, 14}, kOneLost, {}, 0}); }

TEST(EpDegraded, FlatTwoRanksWithReplicas) {
  check_degraded({2, {12, 7}, {{0, 1, 3, 7}, {1, 4, 6, 7}}, {}, 0});  // 2 and 5 lost
}

TEST(EpDegraded, ReplicatedOverlapped) {
  EpOptions o;
  o.overlap = true;
  check_degraded({3, {10, 5, 13}, kTwoLostReplicated, o, 0});
}

TEST(EpDegraded, Hierarchical) {
  EpOptions o;
  o.hierarchical = true;
  check_degraded({3, {10, 5, 13}, kTwoLostReplicated, o, 2});
}

TEST(EpDegraded, RerouteSkipsLostExperts) {
  EpOptions o;
  o.capacity = {OverflowPolicy::kReroute, 0.6};
  check_degraded({3, {16, 8, 12}, kOneLost, o, 0});
}

TEST(EpDegraded, FewerLiveExpertsThanTopKFailsEveryRank) {
  TinyLayer tiny;
  // Only expert 3 survives: 1 live expert, top_k 2.
  const ExpertPlacement p = ExpertPlacement::from_rank_slots({{3}, {}}, kExperts, LostExperts::kAllow).value();
  InProcessGroup group(2, 0, 20);
  std::vector<Status> got(2);
  std::mutex mu;
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const std::vector<float> x = rank_tokens(comm.rank(), 3);
    EpContext ctx{&comm, p, {}, 7};
    auto ws = make_ep_workspace(tiny.config, ctx, 3);
    std::vector<float> out(3 * kHidden);
    Status s = ep_moe_forward(MoeLayerArgs::f32(tiny.config, tiny.layer, x.data(), 3, out.data()), ctx, ws.get());
    std::lock_guard<std::mutex> lock(mu);
    got[static_cast<size_t>(comm.rank())] = s;
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (const Status& s : got) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("layer 7: only 1 of 8 experts have a live replica, fewer than top_k = 2"),
              std::string::npos)
        << s.message();
  }
}

TEST(EpDegraded, RoutingToALostExpertFailsEveryRank) {
  TinyLayer tiny;
  const ExpertPlacement p = ExpertPlacement::from_rank_slots(kOneLost, kExperts, LostExperts::kAllow).value();
  for (bool hierarchical : {false, true}) {
    SCOPED_TRACE(hierarchical ? "hierarchical" : "flat");
    InProcessGroup group(3, hierarchical ? 2 : 0, 20);
    std::vector<Status> got(3);
    std::mutex mu;
    Status st = run_ranks(group, [&](Communicator& comm) -> Status {
      const std::vector<float> x = rank_tokens(comm.rank(), 2);
      std::vector<int> idx{0, 3, 6, 1};
      if (comm.rank() == 1) idx[3] = 5;  // token 1 slot 1: the lost expert
      const std::vector<float> w{0.5f, 0.5f, 0.5f, 0.5f};
      EpContext ctx{&comm, p, {}, 0};
      ctx.options.hierarchical = hierarchical;
      auto ws = make_ep_workspace(tiny.config, ctx, 2);
      std::vector<float> out(2 * kHidden);
      Status s = ep_moe_forward_routed(MoeLayerArgs::f32(tiny.config, tiny.layer, x.data(), 2, out.data()),
                                       {idx.data(), w.data(), 2, kTopK}, ctx, ws.get());
      std::lock_guard<std::mutex> lock(mu);
      got[static_cast<size_t>(comm.rank())] = s;
      return ok_status();
    });
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_NE(got[1].message().find("token 1 slot 1: expert 5 is lost"), std::string::npos) << got[1].message();
    for (int r : {0, 2}) {
      EXPECT_EQ(got[static_cast<size_t>(r)].code(), StatusCode::kInvalidArgument);
      EXPECT_NE(got[static_cast<size_t>(r)].message().find("rank 1 rejected its routing"), std::string::npos)
          << got[static_cast<size_t>(r)].message();
    }
  }
}

}  // namespace
}  // namespace moe
