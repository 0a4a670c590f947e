// Adaptive top-k and adaptive_requeue under expert parallelism: 3 in-process ranks with
// uneven token counts (one empty), flat, overlapped, hierarchical and replicated
// exchanges, give exactly the single-process moe_forward of the same global batch
// (rank-major, as the capacity step orders it), with the same counts on every rank; and
// the all-to-all sends fewer bytes when adaptive k sheds assignments.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>

#include "moe/comm/inproc_communicator.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/moe_layer.h"
#include "tiny_ep_layer.h"

namespace moe {
namespace {

constexpr int kHidden = testing::kTinyHidden, kExperts = testing::kTinyExperts;

std::vector<float> rank_tokens(int rank, int n) {
  std::mt19937 rng(900 + rank);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * kHidden) + 1);
  for (auto& v : x) v = dist(rng);
  return x;
}

struct Setup {
  std::vector<int> counts;                 // tokens per rank
  std::vector<std::vector<int>> slots;     // experts per rank (replicas allowed)
  EpOptions options;
  int ranks_per_node = 0;
};

// Runs the step on every rank; returns rank 0's bytes sent.
int64_t check_ep(const Setup& s) {
  const testing::TinyEpLayer tiny(21, /*router_scale=*/3.0f);
  const int R = static_cast<int>(s.counts.size());
  const ExpertPlacement placement = ExpertPlacement::from_rank_slots(s.slots, kExperts).value();
  int total = 0;
  std::vector<float> all_x;
  std::vector<int> offset;
  for (int r = 0; r < R; ++r) {
    const int n = s.counts[static_cast<size_t>(r)];
    const std::vector<float> x = rank_tokens(r, n);
    offset.push_back(total);
    all_x.insert(all_x.end(), x.begin(), x.begin() + n * kHidden);
    total += n;
  }
  std::vector<float> ref(static_cast<size_t>(total * kHidden) + 1);
  MoeWorkspace mws;
  moe_forward(MoeLayerArgs::f32(tiny.config, tiny.layer, all_x.data(), total, ref.data()), &mws, s.options.capacity);
  if (s.options.capacity.adaptive.enabled) {
    EXPECT_GT(mws.counts.adaptive_dropped, 0);
  }
  if (s.options.capacity.policy == OverflowPolicy::kAdaptiveRequeue) {
    EXPECT_GT(mws.counts.requeued, 0);
  }

  std::vector<StepRoutingCounts> got(static_cast<size_t>(R));
  int64_t bytes0 = 0;
  std::mutex mu;
  InProcessGroup group(R, s.ranks_per_node, 20);
  const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const int r = comm.rank(), n = s.counts[static_cast<size_t>(r)];
    const std::vector<float> x = rank_tokens(r, n);
    EpContext ctx{&comm, placement, s.options, 1};
    LayerWeights mine = tiny.layer;  // only this rank's experts: a wrong dispatch fails
    for (int e = 0; e < kExperts; ++e) mine.experts[static_cast<size_t>(e)].loaded = placement.holds(r, e);
    auto ws = make_ep_workspace(tiny.config, ctx, n);
    std::vector<float> out(static_cast<size_t>(n * kHidden) + 1);
    EpTimings timings;
    MOE_RETURN_IF_ERROR(
        ep_moe_forward(MoeLayerArgs::f32(tiny.config, mine, x.data(), n, out.data()), ctx, ws.get(), &timings));
    for (int i = 0; i < n * kHidden; ++i) {
      const float want = ref[static_cast<size_t>(offset[static_cast<size_t>(r)] * kHidden + i)];
      if (std::fabs(out[static_cast<size_t>(i)] - want) > 1e-5f * (1 + std::fabs(want))) {
        return internal_error("rank " + std::to_string(r) + " element " + std::to_string(i) + ": " +
                              std::to_string(out[static_cast<size_t>(i)]) + " vs " + std::to_string(want));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    got[static_cast<size_t>(r)] = ep_last_routing_counts(*ws);
    if (r == 0) bytes0 = timings.bytes_sent;
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
  for (int r = 0; r < R; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const StepRoutingCounts& c = got[static_cast<size_t>(r)];
    EXPECT_EQ(c.tokens_per_expert, mws.counts.tokens_per_expert);
    EXPECT_EQ(c.adaptive_dropped, mws.counts.adaptive_dropped);
    EXPECT_EQ(c.adaptive_tokens, mws.counts.adaptive_tokens);
    EXPECT_EQ(c.requeued, mws.counts.requeued);
    EXPECT_EQ(c.dropped, mws.counts.dropped);
  }
  return bytes0;
}

const std::vector<std::vector<int>> kBlocks = {{0, 1, 2}, {3, 4, 5}, {6, 7}};
const std::vector<std::vector<int>> kReplicated = {{0, 1, 2, 7}, {3, 4, 5, 0}, {6, 7, 3}};

EpOptions with(CapacityOptions capacity, bool overlap = false, bool hierarchical = false) {
  EpOptions o;
  o.capacity = capacity;
  o.overlap = overlap;
  o.hierarchical = hierarchical;
  return o;
}

CapacityOptions adaptive(OverflowPolicy policy, double factor, double target = 0.8) {
  CapacityOptions c{policy, factor};
  c.adaptive = {true, 1, 2, target, true};
  return c;
}

TEST(EpAdaptiveK, FlatAdaptiveKSavesBytes) {
  const int64_t plain = check_ep({{21, 0, 30}, kBlocks, {}, 0});
  const int64_t shed = check_ep({{21, 0, 30}, kBlocks, with(adaptive(OverflowPolicy::kDropless, 1.0)), 0});
  EXPECT_LT(shed, plain);
}

TEST(EpAdaptiveK, RequeueFlatOverlappedHierarchicalReplicated) {
  check_ep({{21, 0, 30}, kBlocks, with({OverflowPolicy::kAdaptiveRequeue, 0.7}), 0});
  check_ep({{17, 9, 25}, kBlocks, with(adaptive(OverflowPolicy::kAdaptiveRequeue, 0.9, 1.2), /*overlap=*/true), 0});
  check_ep({{17, 9, 25}, kBlocks, with(adaptive(OverflowPolicy::kAdaptiveRequeue, 0.9, 1.2), false, true), 2});
  check_ep({{12, 20, 5}, kReplicated, with(adaptive(OverflowPolicy::kAdaptiveRequeue, 0.9, 1.2)), 0});
}

}  // namespace
}  // namespace moe
