// The expert-parallel MoE layer against the single-process expert FFN on hand-shaped
// routings: ranks with zero or very different token counts, every token on one expert,
// a rank whose experts are all idle, more ranks than experts, uneven expert split, and
// a routing row with a duplicate expert (rejected on every rank, the next step fine).
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <atomic>
#include <mutex>
#include <random>

#include "moe/comm/inproc_communicator.h"
#include "moe/moe/ep_moe_layer.h"
#include "tiny_ep_layer.h"
#include "moe/moe/expert_ffn.h"

namespace moe {
namespace {

constexpr int kHidden = testing::kTinyHidden, kExperts = testing::kTinyExperts,
              kTopK = testing::kTinyTopK;

struct TinyLayer : testing::TinyEpLayer {
  TinyLayer() : TinyEpLayer(7) {}
};

struct RankInput {
  std::vector<float> x;
  std::vector<int> topk;
  std::vector<float> w;
  int n = 0;
};

using Router = std::function<std::pair<int, int>(int rank, int token)>;

RankInput make_input(int rank, int n, const Router& route) {
  std::mt19937 rng(100 + rank);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  RankInput in;
  in.n = n;
  in.x.resize(static_cast<size_t>(n * kHidden));
  for (auto& v : in.x) v = dist(rng);
  for (int t = 0; t < n; ++t) {
    auto [a, b] = route(rank, t);
    in.topk.insert(in.topk.end(), {a, b});
    in.w.insert(in.w.end(), {0.7f, 0.3f});
  }
  return in;
}

// Runs one EP step on `ranks` ranks with per-rank token counts and routing, and checks
// each rank's output against the single-process grouped expert FFN of its own tokens.
void check_step(int ranks, const std::vector<int>& counts, const Router& route, EpOptions options = {},
                int ranks_per_node = 0, const ExpertPlacement* placement = nullptr) {
  TinyLayer tiny;
  InProcessGroup group(ranks, ranks_per_node, 20);
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const RankInput in = make_input(comm.rank(), counts[static_cast<size_t>(comm.rank())], route);
    EpContext ctx{&comm, placement ? *placement : ExpertPlacement::contiguous(kExperts, ranks), {}};
    ctx.options = options;
    // This rank's weights: only the experts the placement gives it (a wrong dispatch
    // would hit an unloaded expert and fail).
    LayerWeights mine = tiny.layer;
    for (int e = 0; e < kExperts; ++e) mine.experts[static_cast<size_t>(e)].loaded = ctx.placement.holds(comm.rank(), e);
    auto ws = make_ep_workspace(tiny.config, ctx, in.n);
    std::vector<float> out(static_cast<size_t>(in.n * kHidden) + 1);
    MOE_RETURN_IF_ERROR(ep_moe_forward_routed(MoeLayerArgs::f32(tiny.config, mine, in.x.data(), in.n, out.data()),
                                              {in.topk.data(), in.w.data(), in.n, kTopK}, ctx, ws.get()));
    ExpertWorkspace ews;
    std::vector<float> ref(static_cast<size_t>(in.n * kHidden) + 1);
    grouped_expert_ffn(MoeLayerArgs::f32(tiny.config, tiny.layer, in.x.data(), in.n, ref.data()),
                       {in.topk.data(), in.w.data(), in.n, kTopK}, &ews);
    for (int i = 0; i < in.n * kHidden; ++i) {
      if (std::fabs(out[static_cast<size_t>(i)] - ref[static_cast<size_t>(i)]) > 1e-5f * (1 + std::fabs(ref[static_cast<size_t>(i)]))) {
        return internal_error("rank " + std::to_string(comm.rank()) + " element " + std::to_string(i) + ": " +
                              std::to_string(out[static_cast<size_t>(i)]) + " vs " + std::to_string(ref[static_cast<size_t>(i)]));
      }
    }
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
}

std::pair<int, int> spread(int rank, int t) { return {(rank * 3 + t) % kExperts, (rank * 3 + t + 1 + t % 5) % kExperts}; }

// Replicated and permuted placements (every expert on 1-3 ranks, not in id order).
ExpertPlacement replicated_placement(int ranks) {
  std::vector<std::vector<int>> slots(static_cast<size_t>(ranks));
  for (int e = 0; e < kExperts; ++e) {
    const int copies = 1 + (e % 3 == 0) + (e == 5);
    for (int c = 0; c < copies && c < ranks; ++c) slots[static_cast<size_t>((e * 5 + c) % ranks)].push_back(e);
  }
  // (c < ranks, so the copies land on distinct ranks; the sort orders the slots.)
  for (auto& s : slots) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  return ExpertPlacement::from_rank_slots(slots, kExperts).value();
}

TEST(EpMoeLayerReplicas, ReplicatedPlacementFlat) {
  for (int ranks : {2, 3, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const ExpertPlacement p = replicated_placement(ranks);
    ASSERT_TRUE(p.has_replicas());
    std::vector<int> counts(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) counts[static_cast<size_t>(r)] = 3 + 7 * r;
    check_step(ranks, counts, spread, {}, 0, &p);
  }
}

TEST(EpMoeLayerReplicas, ReplicatedPlacementHierarchicalAndOverlap) {
  const ExpertPlacement p = replicated_placement(4);
  EpOptions h;
  h.hierarchical = true;
  check_step(4, {5, 0, 9, 17}, spread, h, 2, &p);
  EpOptions o;
  o.overlap = true;
  check_step(4, {5, 0, 9, 17}, spread, o, 0, &p);
}

TEST(EpMoeLayer, RanksWithZeroAndVeryDifferentTokenCounts) {
  check_step(4, {0, 7, 1, 65}, spread);
}

TEST(EpMoeLayer, AllRanksEmpty) { check_step(3, {0, 0, 0}, spread); }

TEST(EpMoeLayer, EveryTokenOnTheSameExpert) {
  check_step(4, {9, 3, 17, 5}, [](int, int) { return std::pair<int, int>{5, 6}; });
}

TEST(EpMoeLayer, AllExpertsOfOneRankIdle) {
  // Rank 0 holds experts 0 and 1: nobody routes there.
  check_step(4, {6, 6, 6, 6}, [](int r, int t) { return std::pair<int, int>{2 + (r + t) % 6, 2 + (r + t + 1) % 6}; });
}

TEST(EpMoeLayer, ExpertsNotDivisibleByRanks) { check_step(3, {5, 11, 2}, spread); }

TEST(EpMoeLayer, MoreRanksThanExperts) { check_step(10, {3, 0, 4, 1, 0, 2, 7, 0, 1, 5}, spread); }

// The same hard cases through the two-level (hierarchical) all-to-all.
EpOptions hier() {
  EpOptions o;
  o.hierarchical = true;
  return o;
}
TEST(EpMoeLayerHierarchical, FourRanksAsTwoNodes) { check_step(4, {0, 7, 1, 65}, spread, hier(), 2); }
TEST(EpMoeLayerHierarchical, ThreeRanksUnevenNodes) { check_step(3, {5, 11, 2}, spread, hier(), 2); }
TEST(EpMoeLayerHierarchical, EveryTokenOnOneExpert) {
  check_step(4, {9, 3, 17, 5}, [](int, int) { return std::pair<int, int>{5, 6}; }, hier(), 2);
}
TEST(EpMoeLayerHierarchical, TenRanksThreePerNode) { check_step(10, {3, 0, 4, 1, 0, 2, 7, 0, 1, 5}, spread, hier(), 3); }
TEST(EpMoeLayerHierarchical, OneNodeDegeneratesToFlat) { check_step(4, {4, 4, 4, 4}, spread, hier(), 0); }
TEST(EpMoeLayerOverlap, TwoMicroBatches) {
  EpOptions o;
  o.overlap = true;
  check_step(4, {0, 7, 1, 65}, spread, o);
}

// Counts the bytes an alltoallv moves between ranks of different nodes.
class CrossNodeCounter : public Communicator {
 public:
  CrossNodeCounter(Communicator& inner, std::atomic<int64_t>* bytes) : in_(inner), bytes_(bytes) {}
  int rank() const override { return in_.rank(); }
  int size() const override { return in_.size(); }
  int node_of(int r) const override { return in_.node_of(r); }
  int num_nodes() const override { return in_.num_nodes(); }
  std::string backend() const override { return "counter"; }
  void set_timeout_seconds(double seconds) override { in_.set_timeout_seconds(seconds); }
  double timeout_seconds() const override { return in_.timeout_seconds(); }
  void count(const std::vector<size_t>& send_bytes) {
    for (int r = 0; r < size(); ++r) {
      if (node_of(r) != node_of(rank())) *bytes_ += static_cast<int64_t>(send_bytes[static_cast<size_t>(r)]);
    }
  }
  Status alltoallv(const void* s, const std::vector<size_t>& sb, void* r, const std::vector<size_t>& rb) override {
    count(sb);
    return in_.alltoallv(s, sb, r, rb);
  }
  StatusOr<std::unique_ptr<CommRequest>> ialltoallv(const void* s, const std::vector<size_t>& sb, void* r,
                                                    const std::vector<size_t>& rb) override {
    count(sb);
    return in_.ialltoallv(s, sb, r, rb);
  }
  Status alltoall_int64(const int64_t* s, int64_t* r) override { return in_.alltoall_int64(s, r); }
  Status allreduce_sum(float* d, size_t n) override { return in_.allreduce_sum(d, n); }
  Status allreduce_sum(int64_t* d, size_t n) override { return in_.allreduce_sum(d, n); }
  Status allgather(const void* s, size_t b, void* r) override { return in_.allgather(s, b, r); }
  Status broadcast(void* d, size_t b, int root) override { return in_.broadcast(d, b, root); }
  Status barrier() override { return in_.barrier(); }
  Status send(const void* d, size_t b, int dest, int tag) override { return in_.send(d, b, dest, tag); }
  Status recv(void* d, size_t b, int src, int tag) override { return in_.recv(d, b, src, tag); }

 private:
  Communicator& in_;
  std::atomic<int64_t>* bytes_;
};

// Rank 0 (node 0) sends 8 tokens whose two experts sit on ranks 2 and 3 (both node 1):
// flat dispatch crosses nodes twice per token, hierarchical once.
TEST(EpMoeLayerHierarchical, CrossesToARemoteNodeOncePerToken) {
  TinyLayer tiny;
  std::atomic<int64_t> cross[2] = {0, 0};
  for (int mode = 0; mode < 2; ++mode) {
    InProcessGroup group(4, 2, 20);
    Status st = run_ranks(group, [&](Communicator& inner) -> Status {
      CrossNodeCounter comm(inner, &cross[mode]);
      const int n = comm.rank() == 0 ? 8 : 0;
      const RankInput in = make_input(comm.rank(), n, [](int, int) { return std::pair<int, int>{4, 6}; });
      EpContext ctx{&comm, ExpertPlacement::contiguous(kExperts, 4), {}};
      ctx.options.hierarchical = mode == 1;
      auto ws = make_ep_workspace(tiny.config, ctx, in.n);
      std::vector<float> out(static_cast<size_t>(n * kHidden) + 1);
      return ep_moe_forward_routed(MoeLayerArgs::f32(tiny.config, tiny.layer, in.x.data(), n, out.data()),
                                   {in.topk.data(), in.w.data(), n, kTopK}, ctx, ws.get());
    });
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  const int64_t row = kHidden * 4 + kTopK * 8, out_row = kHidden * 4;
  EXPECT_EQ(cross[0].load(), 8 * 2 * (row + out_row));  // flat: 2 ranks of node 1 per token, both ways
  EXPECT_EQ(cross[1].load(), 8 * 1 * (row + out_row));  // hierarchical: once per token, both ways
}

TEST(EpMoeLayer, DuplicateExpertIsRejectedOnEveryRankAndNextStepIsExact) {
  TinyLayer tiny;
  InProcessGroup group(3, 0, 20);
  std::vector<Status> first(3);
  std::mutex mu;
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    EpContext ctx{&comm, ExpertPlacement::contiguous(kExperts, 3), {}};
    auto ws = make_ep_workspace(tiny.config, ctx, 4);
    RankInput in = make_input(comm.rank(), 4, spread);
    if (comm.rank() == 2) in.topk[2 * 1 + 1] = in.topk[2 * 1];  // token 1 lists one expert twice
    std::vector<float> out(static_cast<size_t>(in.n * kHidden));
    Status s = ep_moe_forward_routed(MoeLayerArgs::f32(tiny.config, tiny.layer, in.x.data(), in.n, out.data()),
                                     {in.topk.data(), in.w.data(), in.n, kTopK}, ctx, ws.get());
    {
      std::lock_guard<std::mutex> lock(mu);
      first[static_cast<size_t>(comm.rank())] = s;
    }
    // The group is still usable: a valid step gives exact results.
    RankInput ok_in = make_input(comm.rank(), 4, spread);
    MOE_RETURN_IF_ERROR(
        ep_moe_forward_routed(MoeLayerArgs::f32(tiny.config, tiny.layer, ok_in.x.data(), ok_in.n, out.data()),
                              {ok_in.topk.data(), ok_in.w.data(), ok_in.n, kTopK}, ctx, ws.get()));
    ExpertWorkspace ews;
    std::vector<float> ref(out.size());
    grouped_expert_ffn(MoeLayerArgs::f32(tiny.config, tiny.layer, ok_in.x.data(), ok_in.n, ref.data()),
                       {ok_in.topk.data(), ok_in.w.data(), ok_in.n, kTopK}, &ews);
    for (size_t i = 0; i < out.size(); ++i) {
      if (std::fabs(out[i] - ref[i]) > 1e-5f * (1 + std::fabs(ref[i]))) return internal_error("mismatch after reject");
    }
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_NE(first[2].message().find("lists expert"), std::string::npos) << first[2].message();
  for (int r : {0, 1}) {
    EXPECT_EQ(first[static_cast<size_t>(r)].code(), StatusCode::kInvalidArgument);
    EXPECT_NE(first[static_cast<size_t>(r)].message().find("rank 2 rejected its routing"), std::string::npos)
        << first[static_cast<size_t>(r)].message();
  }
}

}  // namespace
}  // namespace moe
