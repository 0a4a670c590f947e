// The pipelined overlap of the expert-parallel layer (EpOptions::overlap with N
// micro-batches): results against the single-process grouped expert FFN for N = 2..8 and
// auto, the exchanges it issues (3 per micro-batch, counted by FaultyCommunicator), the
// refusal of micro_batches out of range (hierarchical + overlap: ep_hier_overlap_test.cc), comm_overlap_ratio's
// arithmetic, and the progress hook of grouped_expert_ffn (called, results bitwise equal).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "moe/comm/faulty_communicator.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/expert_ffn.h"
#include "tiny_ep_layer.h"

namespace moe {
namespace {

constexpr int kHidden = testing::kTinyHidden, kExperts = testing::kTinyExperts, kTopK = testing::kTinyTopK;

struct Input {
  std::vector<float> x;
  std::vector<int> topk;
  std::vector<float> w;
  int n = 0;
};

Input make_input(int rank, int n) {
  std::mt19937 rng(300 + rank);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Input in;
  in.n = n;
  in.x.resize(static_cast<size_t>(n * kHidden));
  for (auto& v : in.x) v = dist(rng);
  for (int t = 0; t < n; ++t) {
    const int a = (rank * 3 + t) % kExperts, b = (rank * 3 + t + 1 + t % 5) % kExperts;
    in.topk.insert(in.topk.end(), {a, b});
    in.w.insert(in.w.end(), {0.6f, 0.4f});
  }
  return in;
}

struct StepResult {
  Status status;
  std::vector<int64_t> ops;  // operations each rank issued on the communicator
  std::vector<EpTimings> timings;
};

// One EP step over `counts.size()` in-process ranks; each rank's output is checked
// against the single-process grouped expert FFN of its tokens (same tolerance as
// ep_moe_layer_test: partial sums per rank change the f32 summation order).
StepResult run_step(const std::vector<int>& counts, const EpOptions& options, int ranks_per_node = 0) {
  testing::TinyEpLayer tiny(11);
  const int ranks = static_cast<int>(counts.size());
  InProcessGroup group(ranks, ranks_per_node, 20);
  StepResult result;
  result.ops.assign(static_cast<size_t>(ranks), 0);
  result.timings.resize(static_cast<size_t>(ranks));
  result.status = run_ranks(group, [&](Communicator& inner) -> Status {
    FaultyCommunicator comm(inner, FaultPlan{});
    const Input in = make_input(comm.rank(), counts[static_cast<size_t>(comm.rank())]);
    EpContext ctx{&comm, ExpertPlacement::contiguous(kExperts, ranks), options};
    LayerWeights mine = tiny.layer;
    for (int e = 0; e < kExperts; ++e) mine.experts[static_cast<size_t>(e)].loaded = ctx.placement.holds(comm.rank(), e);
    auto ws = make_ep_workspace(tiny.config, ctx, in.n);
    std::vector<float> out(static_cast<size_t>(in.n * kHidden) + 1);
    EpTimings& t = result.timings[static_cast<size_t>(comm.rank())];
    const Status st = ep_moe_forward_routed(MoeLayerArgs::f32(tiny.config, mine, in.x.data(), in.n, out.data()),
                                            {in.topk.data(), in.w.data(), in.n, kTopK}, ctx, ws.get(), &t);
    result.ops[static_cast<size_t>(comm.rank())] = comm.counts().ops;
    MOE_RETURN_IF_ERROR(st);
    ExpertWorkspace ews;
    std::vector<float> ref(static_cast<size_t>(in.n * kHidden) + 1);
    grouped_expert_ffn(MoeLayerArgs::f32(tiny.config, tiny.layer, in.x.data(), in.n, ref.data()),
                       {in.topk.data(), in.w.data(), in.n, kTopK}, &ews);
    for (int i = 0; i < in.n * kHidden; ++i) {
      const float a = out[static_cast<size_t>(i)], b = ref[static_cast<size_t>(i)];
      if (std::fabs(a - b) > 1e-5f * (1 + std::fabs(b))) {
        return internal_error("rank " + std::to_string(comm.rank()) + " element " + std::to_string(i) + ": " +
                              std::to_string(a) + " vs " + std::to_string(b));
      }
    }
    return ok_status();
  });
  return result;
}

EpOptions overlap(int micro_batches) {
  EpOptions o;
  o.overlap = true;
  o.micro_batches = micro_batches;
  return o;
}

TEST(EpOverlapPipeline, MatchesSingleProcessForEveryMicroBatchCount) {
  for (int n : {2, 3, 4, 8}) {
    SCOPED_TRACE("micro_batches " + std::to_string(n));
    // Ranks with no tokens, fewer tokens than micro-batches, and many.
    const StepResult r = run_step({0, 7, 1, 65}, overlap(n));
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    // Per micro-batch: the counts all-to-all, the dispatch and the combine.
    for (int64_t ops : r.ops) EXPECT_EQ(ops, 3 * n);
  }
}

TEST(EpOverlapPipeline, AutoChoosesFromTheGroupsMeanTokensPerRank) {
  // Mean 8 tokens per rank -> the floor of 2; mean (0 + 300 + 340) / 3 = 213 -> 213 / 64 = 3;
  // mean 1000 -> 15, capped at 8. One int64 all-reduce first.
  struct Case {
    std::vector<int> counts;
    int expected;
  };
  for (const Case& c : {Case{{8, 8}, 2}, Case{{0, 300, 340}, 3}, Case{{1000, 1000}, 8}}) {
    SCOPED_TRACE("expected " + std::to_string(c.expected));
    const StepResult r = run_step(c.counts, overlap(0));
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    for (int64_t ops : r.ops) EXPECT_EQ(ops, 1 + 3 * c.expected);
  }
}

TEST(EpOverlapPipeline, TimingsGiveARatioInRange) {
  const StepResult r = run_step({40, 40}, overlap(4));
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  for (const EpTimings& t : r.timings) {
    EXPECT_EQ(t.calls, 1);
    EXPECT_GT(t.exchange_seconds, 0);
    EXPECT_LE(t.comm_wait_seconds, t.exchange_seconds + 1e-9);
    EXPECT_GE(t.comm_overlap_ratio(), 0.0);
    EXPECT_LE(t.comm_overlap_ratio(), 1.0);
  }
}

TEST(EpOverlapPipeline, MicroBatchesOutOfRangeAreRefused) {
  for (int bad : {1, -1, kMaxEpMicroBatches + 1}) {
    const StepResult r = run_step({3, 3}, overlap(bad));
    ASSERT_FALSE(r.status.ok()) << bad;
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status.message().find("micro_batches"), std::string::npos) << r.status.message();
    for (int64_t ops : r.ops) EXPECT_EQ(ops, 0);  // refused before any exchange
  }
}

TEST(EpTimingsRatio, HandComputedCases) {
  EpTimings t;
  EXPECT_EQ(t.comm_overlap_ratio(), 0.0);  // no exchange yet
  t.exchange_seconds = 4;
  t.comm_wait_seconds = 1;
  EXPECT_DOUBLE_EQ(t.comm_overlap_ratio(), 0.75);
  t.comm_wait_seconds = 4;  // blocking: waited on at once
  EXPECT_DOUBLE_EQ(t.comm_overlap_ratio(), 0.0);
  t.comm_wait_seconds = 5;  // clock granularity: never below 0
  EXPECT_DOUBLE_EQ(t.comm_overlap_ratio(), 0.0);
  t.comm_wait_seconds = 0;
  EXPECT_DOUBLE_EQ(t.comm_overlap_ratio(), 1.0);
}

TEST(ExpertFfnProgress, HookIsCalledAndResultsAreBitwiseEqual) {
  testing::TinyEpLayer tiny(5);
  const Input in = make_input(2, 37);
  std::vector<float> plain(static_cast<size_t>(in.n * kHidden)), hooked(plain.size());
  ExpertWorkspace a, b;
  a.max_chunk_rows = b.max_chunk_rows = 30;  // 74 assignments in 3 chunks
  grouped_expert_ffn(MoeLayerArgs::f32(tiny.config, tiny.layer, in.x.data(), in.n, plain.data()),
                     {in.topk.data(), in.w.data(), in.n, kTopK}, &a);
  int calls = 0;
  b.progress = [&calls] { ++calls; };
  grouped_expert_ffn(MoeLayerArgs::f32(tiny.config, tiny.layer, in.x.data(), in.n, hooked.data()),
                     {in.topk.data(), in.w.data(), in.n, kTopK}, &b);
  // 8 experts in slices of 2, after each slice, per chunk.
  EXPECT_EQ(calls, 3 * ExpertWorkspace::kProgressSlices);
  ASSERT_EQ(plain, hooked);
}

}  // namespace
}  // namespace moe
