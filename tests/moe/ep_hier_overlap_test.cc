// The hierarchical all-to-all with overlap (EpOptions::hierarchical + overlap):
// 4 in-process ranks as 2 emulated nodes of 2. With batch-invariant kernels its output
// equals the blocking hierarchical exchange's bitwise (the same steps on the same rows,
// only the timing of the exchanges differs), for 2 and 3 micro-batches and auto, with
// skewed routing and a rank with zero tokens, top-k 2 and 4, f32 and bf16 on the wire;
// with top-k 2 and f32 it equals the flat exchange bitwise (two partial sums per token:
// f32 addition commutes), and the single-process FFN within f32 tolerance. It moves the
// same bytes per link as the blocking form, issues one counts exchange and then five
// exchanges per micro-batch, and reports a comm_overlap_ratio in [0, 1].
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "moe/comm/faulty_communicator.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/expert_ffn.h"
#include "moe/ops/kernel_options.h"
#include "tiny_ep_layer.h"

namespace moe {
namespace {

constexpr int kRanks = 4, kRanksPerNode = 2, kHidden = testing::kTinyHidden, kExperts = testing::kTinyExperts;

struct Input {
  std::vector<float> x;
  std::vector<int> topk;
  std::vector<float> w;
  int n = 0;
};

// `skewed`: 3 of 4 tokens pick expert 7 (rank 3, node 1) plus one of node 1's experts
// 4..6, so node 1's gateway forwards most rows; the rest spread over all experts.
Input make_input(int rank, int n, int top_k, bool skewed) {
  std::mt19937 rng(500 + rank);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, kExperts - 1);
  Input in;
  in.n = n;
  in.x.resize(static_cast<size_t>(n * kHidden));
  for (auto& v : in.x) v = dist(rng);
  for (int t = 0; t < n; ++t) {
    std::vector<int> ids;
    if (skewed && t % 4 != 3) ids = {7, 4 + t % 3};
    while (static_cast<int>(ids.size()) < top_k) {
      const int e = pick(rng);
      bool dup = false;
      for (int d : ids) dup |= d == e;
      if (!dup) ids.push_back(e);
    }
    float sum = 0;
    std::vector<float> w;
    for (int j = 0; j < top_k; ++j) w.push_back(0.1f + std::fabs(dist(rng)));
    for (float v : w) sum += v;
    for (int j = 0; j < top_k; ++j) {
      in.topk.push_back(ids[static_cast<size_t>(j)]);
      in.w.push_back(w[static_cast<size_t>(j)] / sum);
    }
  }
  return in;
}

struct RunResult {
  Status status;
  std::vector<std::vector<float>> out;  // per rank [n, hidden]
  std::vector<EpTimings> timings;
  std::vector<int64_t> ops;
};

struct Case {
  std::vector<int> counts;  // tokens per rank
  int top_k = 2;
  bool skewed = false;
  bool bf16 = false;
};

RunResult run(const Case& c, bool hierarchical, bool overlap, int micro_batches) {
  testing::TinyEpLayer tiny(17);
  tiny.config.router.top_k = c.top_k;
  InProcessGroup group(kRanks, kRanksPerNode, 20);
  RunResult r;
  r.out.resize(kRanks);
  r.timings.resize(kRanks);
  r.ops.assign(kRanks, 0);
  r.status = run_ranks(group, [&](Communicator& inner) -> Status {
    FaultyCommunicator comm(inner, FaultPlan{});
    const int me = comm.rank();
    const Input in = make_input(me, c.counts[static_cast<size_t>(me)], c.top_k, c.skewed);
    EpOptions o;
    o.hierarchical = hierarchical;
    o.overlap = overlap;
    o.micro_batches = micro_batches;
    o.a2a_bf16 = c.bf16;
    EpContext ctx{&comm, ExpertPlacement::contiguous(kExperts, kRanks), o};
    LayerWeights mine = tiny.layer;
    for (int e = 0; e < kExperts; ++e) mine.experts[static_cast<size_t>(e)].loaded = ctx.placement.holds(me, e);
    // Batch-invariant kernels: an expert's result for a row does not depend on how many
    // rows share its batch (sgemm's blocking would; then only f32 tolerance holds, as for
    // the flat pipeline).
    KernelOptions kernel;
    kernel.batch_invariant = true;
    auto ws = make_ep_workspace(tiny.config, ctx, in.n, kernel);
    std::vector<float>& out = r.out[static_cast<size_t>(me)];
    out.assign(static_cast<size_t>(in.n * kHidden), -1.0f);
    Status st;
    for (int call = 0; call < 2 && st.ok(); ++call) {  // twice: reused buffers give the same result
      st = ep_moe_forward_routed(MoeLayerArgs::f32(tiny.config, mine, in.x.data(), in.n, out.data()),
                                 {in.topk.data(), in.w.data(), in.n, c.top_k}, ctx, ws.get(),
                                 call == 0 ? &r.timings[static_cast<size_t>(me)] : nullptr);
      if (call == 0) r.ops[static_cast<size_t>(me)] = comm.counts().ops;
    }
    MOE_RETURN_IF_ERROR(st);
    if (!c.bf16) {
      ExpertWorkspace ews;
      std::vector<float> ref(static_cast<size_t>(in.n * kHidden) + 1);
      grouped_expert_ffn(MoeLayerArgs::f32(tiny.config, tiny.layer, in.x.data(), in.n, ref.data()),
                         {in.topk.data(), in.w.data(), in.n, c.top_k}, &ews);
      for (int i = 0; i < in.n * kHidden; ++i) {
        const float a = out[static_cast<size_t>(i)], b = ref[static_cast<size_t>(i)];
        if (std::fabs(a - b) > 1e-5f * (1 + std::fabs(b))) {
          return internal_error("rank " + std::to_string(me) + " element " + std::to_string(i) + ": " +
                                std::to_string(a) + " vs single-process " + std::to_string(b));
        }
      }
    }
    return ok_status();
  });
  return r;
}

void expect_bitwise(const RunResult& a, const RunResult& b, const char* what) {
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(a.out[static_cast<size_t>(r)].size(), b.out[static_cast<size_t>(r)].size()) << what << " rank " << r;
    if (a.out[static_cast<size_t>(r)].empty()) continue;  // a rank without tokens
    EXPECT_EQ(0, std::memcmp(a.out[static_cast<size_t>(r)].data(), b.out[static_cast<size_t>(r)].data(),
                             a.out[static_cast<size_t>(r)].size() * sizeof(float)))
        << what << ": rank " << r << " differs";
  }
}

void check_case(const Case& c) {
  const RunResult blocking = run(c, true, false, 0);
  ASSERT_TRUE(blocking.status.ok()) << blocking.status.to_string();
  for (int n : {2, 3}) {
    SCOPED_TRACE("micro_batches " + std::to_string(n));
    const RunResult piped = run(c, true, true, n);
    ASSERT_TRUE(piped.status.ok()) << piped.status.to_string();
    expect_bitwise(piped, blocking, "hierarchical overlap vs hierarchical");
    for (int r = 0; r < kRanks; ++r) {
      const EpTimings& t = piped.timings[static_cast<size_t>(r)];
      const EpTimings& b = blocking.timings[static_cast<size_t>(r)];
      EXPECT_EQ(t.bytes_sent, b.bytes_sent) << "rank " << r;
      EXPECT_EQ(t.bytes_to_rank, b.bytes_to_rank) << "rank " << r;
      EXPECT_EQ(t.bytes_from_rank, b.bytes_from_rank) << "rank " << r;
      EXPECT_GT(t.exchange_seconds, 0);
      EXPECT_GE(t.comm_overlap_ratio(), 0.0);
      EXPECT_LE(t.comm_overlap_ratio(), 1.0);
      // One exchange of every micro-batch's stage-1 counts, then per micro-batch 5
      // nonblocking exchanges (stage-1 rows, stage-2 counts, stage-2 rows, stage-2 and
      // stage-1 results); blocking: the counts, then the same 5 blocking.
      EXPECT_EQ(piped.ops[static_cast<size_t>(r)], 1 + 5 * n);
      EXPECT_EQ(blocking.ops[static_cast<size_t>(r)], 6);
    }
  }
  const RunResult autom = run(c, true, true, 0);
  ASSERT_TRUE(autom.status.ok()) << autom.status.to_string();
  expect_bitwise(autom, blocking, "hierarchical overlap (auto) vs hierarchical");
  if (c.top_k == 2 && !c.bf16) {  // bf16: the gateway rounds its node's sum once, flat each partial
    const RunResult flat = run(c, false, false, 0);
    ASSERT_TRUE(flat.status.ok()) << flat.status.to_string();
    expect_bitwise(blocking, flat, "hierarchical vs flat");
  }
}

TEST(EpHierOverlap, EqualsBlockingHierarchicalWithAnEmptyRank) { check_case({{9, 0, 13, 5}}); }

TEST(EpHierOverlap, EqualsBlockingHierarchicalWithSkewedRouting) { check_case({{24, 17, 0, 31}, 2, true}); }

TEST(EpHierOverlap, EqualsBlockingHierarchicalWithTopK4) { check_case({{0, 11, 20, 7}, 4, true}); }

TEST(EpHierOverlap, EqualsBlockingHierarchicalWithBf16OnTheWire) { check_case({{12, 3, 0, 18}, 2, false, true}); }

// Fewer tokens than micro-batches everywhere, and no tokens at all on any rank.
TEST(EpHierOverlap, TinyAndEmptyCalls) {
  check_case({{1, 0, 2, 0}});
  check_case({{0, 0, 0, 0}});
}

TEST(EpHierOverlap, MicroBatchesOutOfRangeAreRefusedBeforeAnyExchange) {
  const RunResult r = run({{3, 3, 3, 3}}, true, true, kMaxEpMicroBatches + 1);
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("micro_batches"), std::string::npos) << r.status.message();
  for (int64_t ops : r.ops) EXPECT_EQ(ops, 0);
}

// A rank naming an expert outside the model (in its last micro-batch) fails every rank
// in the counts exchange, before any payload moves.
TEST(EpHierOverlap, BadRoutingFailsEveryRank) {
  testing::TinyEpLayer tiny(3);
  InProcessGroup group(kRanks, kRanksPerNode, 20);
  std::vector<Status> got(kRanks);
  std::vector<int64_t> ops(kRanks);
  (void)run_ranks(group, [&](Communicator& inner) -> Status {
    FaultyCommunicator comm(inner, FaultPlan{});
    const Input in = make_input(comm.rank(), 6, 2, false);
    std::vector<int> topk = in.topk;
    if (comm.rank() == 2) topk[11] = kExperts + 3;  // token 5, slot 1: the third micro-batch
    EpOptions o;
    o.hierarchical = o.overlap = true;
    o.micro_batches = 3;
    EpContext ctx{&comm, ExpertPlacement::contiguous(kExperts, kRanks), o};
    auto ws = make_ep_workspace(tiny.config, ctx, in.n);
    std::vector<float> out(static_cast<size_t>(in.n * kHidden));
    got[static_cast<size_t>(comm.rank())] = ep_moe_forward_routed(
        MoeLayerArgs::f32(tiny.config, tiny.layer, in.x.data(), in.n, out.data()), {topk.data(), in.w.data(), in.n, 2},
        ctx, ws.get());
    ops[static_cast<size_t>(comm.rank())] = comm.counts().ops;
    return ok_status();
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)].code(), StatusCode::kInvalidArgument) << r;
    EXPECT_NE(got[static_cast<size_t>(r)].message().find(r == 2 ? "expert id 11" : "rank 2 rejected"), std::string::npos)
        << got[static_cast<size_t>(r)].to_string();
    EXPECT_EQ(ops[static_cast<size_t>(r)], 1) << "rank " << r << ": only the counts exchange";
  }
}

}  // namespace
}  // namespace moe
