// Hybrid TP x EP MoE (MixServe) on 4 in-process ranks as 2 nodes x 2: TP groups {0,1},
// {2,3} (one per node), EP groups {0,2}, {1,3} (one rank per node). Experts are split
// over the EP group (4 per node) and each expert's intermediate dim over the TP group
// (tests/moe/hybrid_layer.h slices the shards by hand).
//   fused:     MoeBlock::forward_fused (RS -> route -> A2A -> AG/experts/RS -> A2A -> AG),
//              with and without the two-micro-batch overlap, against the single-process
//              x + attn + moe_forward(norm(x + attn)) (+ shared expert) with full weights,
//              where attn is the sum of random per-rank partials;
//   non-fused: MoeBlock::forward on every TP rank over all m tokens, then an all-reduce
//              in the node, against moe_forward (+ shared expert);
//   errors:    m disagreeing inside a TP group, shards that do not match the config, a
//              hierarchical exchange, the fused context in forward() -- each an error on
//              every rank, not a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hybrid_layer.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/moe_layer.h"
#include "moe/moe/swiglu_mlp.h"
#include "moe/ops/norm.h"
#include "moe/transformer/mlp_blocks.h"

namespace moe {
namespace {

using testing::HybridLayer;
using testing::TpShard;
constexpr int kTp = 2, kEp = 2, kWorld = kTp * kEp;
constexpr int64_t kH = HybridLayer::kHidden;

// The four groups, built as separate in-process groups (world rank w: tp_rank w % 2,
// ep_rank w / 2).
// timeout: short in the error tests, where ranks of the other node wait for peers that
// left (DeadlineExceeded).
struct Groups {
  InProcessGroup world;
  std::array<std::unique_ptr<InProcessGroup>, kEp> tp;  // per node
  std::array<std::unique_ptr<InProcessGroup>, kTp> ep;  // per tp_rank; one rank per node
  explicit Groups(double timeout = 20) : world(kWorld, kTp, timeout) {
    for (auto& g : tp) g = std::make_unique<InProcessGroup>(kTp, 0, timeout);
    for (auto& g : ep) g = std::make_unique<InProcessGroup>(kEp, 1, timeout);
  }
  Communicator& tp_of(int w) { return tp[static_cast<size_t>(w / kTp)]->rank(w % kTp); }
  Communicator& ep_of(int w) { return ep[static_cast<size_t>(w % kTp)]->rank(w / kTp); }
};

std::vector<float> random_rows(int64_t m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(m * kH));
  for (auto& e : v) e = dist(rng);
  return v;
}

// One node's inputs: x, and attention partials per TP rank summing to attn.
struct NodeInput {
  int64_t m = 0;
  std::vector<float> x, attn;
  std::array<std::vector<float>, kTp> partial;
};

NodeInput node_input(int node, int64_t m) {
  NodeInput in;
  in.m = m;
  in.x = random_rows(m, 10 + static_cast<uint32_t>(node));
  in.attn = random_rows(m, 20 + static_cast<uint32_t>(node));
  in.partial[0] = random_rows(m, 30 + static_cast<uint32_t>(node));
  in.partial[1] = in.attn;
  for (size_t i = 0; i < in.attn.size(); ++i) in.partial[1][i] -= in.partial[0][i];
  return in;
}

// Single process: y = x + attn; h = norm(y); out = y + moe(h) + shared(h). Also returns
// h (the block input of the non-fused path) and the routing counts.
struct Reference {
  std::vector<float> out, h, moe;  // moe: moe(h) + shared(h)
  std::vector<int64_t> tokens_per_expert;
};

Reference reference(const HybridLayer& layer, const NodeInput& in) {
  Reference ref;
  const LayerWeights& L = layer.weights.layers[0];
  const size_t n = static_cast<size_t>(in.m * kH);
  std::vector<float> y(n + 1);
  for (size_t i = 0; i < n; ++i) y[i] = in.x[i] + in.attn[i];
  ref.h.assign(n + 1, 0);
  if (in.m > 0) {
    rms_norm(TensorView::f32(y.data(), {in.m, kH}), TensorView::f32(L.post_attention_norm.data(), {kH}),
             static_cast<float>(layer.config.rms_norm_eps), TensorView::f32(ref.h.data(), {in.m, kH}));
  }
  ref.moe.assign(n + 1, 0);
  MoeWorkspace ws;
  moe_forward(MoeLayerArgs::f32(layer.config, L, ref.h.data(), in.m, ref.moe.data()), &ws);
  ref.tokens_per_expert = ws.counts.tokens_per_expert;
  MlpWorkspace mlp;
  add_shared_expert(L, ref.h.data(), in.m, &mlp, ref.moe.data());
  ref.out.resize(n);
  for (size_t i = 0; i < n; ++i) ref.out[i] = y[i] + ref.moe[i];
  return ref;
}

// |got - want| <= 1e-5 * (range of want + 1).
Status expect_close(const std::vector<float>& got, const std::vector<float>& want, size_t n, const std::string& what) {
  if (n == 0) return ok_status();
  const auto [lo, hi] = std::minmax_element(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(n));
  const float tol = 1e-5f * (*hi - *lo + 1.0f);
  for (size_t i = 0; i < n; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      return internal_error(what + " element " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
                            std::to_string(want[i]));
    }
  }
  return ok_status();
}

struct RankSetup {
  std::unique_ptr<TpShard> shard;
  std::vector<EpContext> ctx;
  std::unique_ptr<MoeBlock> block;
};

// This rank's shard with only its node's experts loaded, its EP context and block.
RankSetup setup_rank(const HybridLayer& layer, Groups& g, int w, EpOptions options) {
  RankSetup s;
  s.shard = std::make_unique<TpShard>(layer, w % kTp, kTp);
  EpContext ctx;
  ctx.comm = &g.ep_of(w);
  ctx.placement = ExpertPlacement::contiguous(HybridLayer::kExperts, kEp);
  ctx.options = options;
  ctx.layer_id = 0;
  for (int e = 0; e < HybridLayer::kExperts; ++e) {
    s.shard->weights.layers[0].experts[static_cast<size_t>(e)].loaded = ctx.placement.holds(w / kTp, e);
  }
  s.ctx.push_back(ctx);
  s.block = std::make_unique<MoeBlock>(s.shard->config, s.shard->weights, &s.ctx, KernelOptions{}, 64);
  return s;
}

void check_fused(bool overlap, bool shared, std::array<int64_t, kEp> m) {
  SCOPED_TRACE("overlap " + std::to_string(overlap) + " shared " + std::to_string(shared) + " m " +
               std::to_string(m[0]) + "," + std::to_string(m[1]));
  HybridLayer layer(3, shared);
  std::array<NodeInput, kEp> in{node_input(0, m[0]), node_input(1, m[1])};
  std::array<Reference, kEp> ref{reference(layer, in[0]), reference(layer, in[1])};
  std::vector<int64_t> want_counts(HybridLayer::kExperts, 0);
  for (const auto& r : ref) {
    for (size_t e = 0; e < want_counts.size() && e < r.tokens_per_expert.size(); ++e) want_counts[e] += r.tokens_per_expert[e];
  }
  Groups g;
  EpOptions options;
  options.overlap = overlap;
  const Status st = run_ranks(g.world, [&](Communicator& world) -> Status {
    const int w = world.rank(), node = w / kTp;
    RankSetup s = setup_rank(layer, g, w, options);
    s.block->set_tp(&g.tp_of(w));
    StepRoutingCounts counts;
    s.block->set_routing_hook([&](int, const StepRoutingCounts& c) { counts = c; });
    const NodeInput& ni = in[static_cast<size_t>(node)];
    std::vector<float> x = ni.x;
    std::vector<float> attn = ni.partial[static_cast<size_t>(w % kTp)];
    for (int rep = 0; rep < 2; ++rep) {  // twice: buffers reused, same answer
      x = ni.x;
      const TensorView xv = ni.m > 0 ? TensorView::f32(x.data(), {ni.m, kH}) : TensorView();
      const TensorView av = ni.m > 0 ? TensorView::f32(attn.data(), {ni.m, kH}) : TensorView();
      MOE_RETURN_IF_ERROR(s.block->forward_fused(0, av, xv));
      MOE_RETURN_IF_ERROR(expect_close(x, ref[static_cast<size_t>(node)].out, x.size(),
                                       "rank " + std::to_string(w) + " rep " + std::to_string(rep)));
      if (counts.tokens_per_expert != want_counts || counts.global_tokens != m[0] + m[1]) {
        return internal_error("rank " + std::to_string(w) + ": routing counts differ from the single process");
      }
    }
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(HybridMoeFused, MatchesSingleProcess) {
  for (bool overlap : {false, true}) {
    for (std::array<int64_t, kEp> m : {std::array<int64_t, kEp>{0, 5}, {1, 1}, {5, 37}, {37, 0}, {0, 0}}) {
      check_fused(overlap, /*shared=*/false, m);
    }
  }
}

TEST(HybridMoeFused, WithGatedSharedExpert) {
  for (bool overlap : {false, true}) {
    for (std::array<int64_t, kEp> m : {std::array<int64_t, kEp>{1, 0}, {5, 37}}) check_fused(overlap, true, m);
  }
}

// Non-fused hybrid: each TP rank dispatches all m tokens over its EP group with its
// expert shards (partial sums), then the node all-reduces.
TEST(HybridMoeNonFused, PartialsAllReducedInTheNodeMatchSingleProcess) {
  for (bool shared : {false, true}) {
    HybridLayer layer(5, shared);
    std::array<NodeInput, kEp> in{node_input(0, 7), node_input(1, 3)};
    std::array<Reference, kEp> ref{reference(layer, in[0]), reference(layer, in[1])};
    Groups g;
    const Status st = run_ranks(g.world, [&](Communicator& world) -> Status {
      const int w = world.rank(), node = w / kTp;
      RankSetup s = setup_rank(layer, g, w, {});
      const Reference& r = ref[static_cast<size_t>(node)];
      const int64_t m = in[static_cast<size_t>(node)].m;
      std::vector<float> out(static_cast<size_t>(m * kH));
      MOE_RETURN_IF_ERROR(s.block->forward(0, TensorView::f32(r.h.data(), {m, kH}), TensorView::f32(out.data(), {m, kH})));
      MOE_RETURN_IF_ERROR(g.tp_of(w).allreduce_sum(out.data(), out.size()));
      return expect_close(out, r.moe, out.size(), "rank " + std::to_string(w));
    });
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
}

// ep_moe_forward itself with expert_tp (the layer-level form, flat and with its own
// two micro-batches): each TP rank routes its own rows (here: a different half of the
// node's tokens), the node's ranks gather/scatter the received rows, and every rank gets
// the full result for its rows without any all-reduce.
TEST(HybridMoeLayer, EpMoeForwardWithExpertTpMatchesMoeForward) {
  for (bool overlap : {false, true}) {
    HybridLayer layer(9, false);
    std::array<NodeInput, kEp> in{node_input(0, 9), node_input(1, 4)};
    std::array<Reference, kEp> ref{reference(layer, in[0]), reference(layer, in[1])};
    Groups g;
    EpOptions options;
    options.overlap = overlap;
    const Status st = run_ranks(g.world, [&](Communicator& world) -> Status {
      const int w = world.rank(), node = w / kTp;
      RankSetup s = setup_rank(layer, g, w, options);
      s.ctx[0].expert_tp = &g.tp_of(w);
      const Reference& r = ref[static_cast<size_t>(node)];
      const int64_t m = in[static_cast<size_t>(node)].m;
      const int64_t begin = (w % kTp == 0) ? 0 : m / 2, n = (w % kTp == 0) ? m / 2 : m - m / 2;
      std::vector<float> out(static_cast<size_t>(n * kH) + 1);
      auto ws = make_ep_workspace(s.shard->config, s.ctx[0], n);
      MOE_RETURN_IF_ERROR(ep_moe_forward(
          MoeLayerArgs::f32(s.shard->config, s.shard->weights.layers[0], r.h.data() + begin * kH, n, out.data()),
          s.ctx[0], ws.get()));
      const std::vector<float> want(r.moe.begin() + begin * kH, r.moe.begin() + (begin + n) * kH);
      return expect_close(out, want, want.size(), "rank " + std::to_string(w));
    });
    EXPECT_TRUE(st.ok()) << "overlap " << overlap << ": " << st.to_string();
  }
}

// Runs fn on every rank and returns each rank's status (no early exit).
std::array<Status, kWorld> per_rank(Groups& g, const std::function<Status(int w)>& fn) {
  std::array<Status, kWorld> out;
  const Status st = run_ranks(g.world, [&](Communicator& world) -> Status {
    out[static_cast<size_t>(world.rank())] = fn(world.rank());
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

TEST(HybridMoeFused, TokenCountsDisagreeingInATpGroupFailEveryRank) {
  HybridLayer layer(3, false);
  Groups g(1.0);
  const auto st = per_rank(g, [&](int w) -> Status {
    RankSetup s = setup_rank(layer, g, w, {});
    s.block->set_tp(&g.tp_of(w));
    const int64_t m = (w == 1) ? 4 : 5;  // rank 1 disagrees with rank 0 (node 0)
    std::vector<float> x = random_rows(m, 1), attn = random_rows(m, 2);
    return s.block->forward_fused(0, TensorView::f32(attn.data(), {m, kH}), TensorView::f32(x.data(), {m, kH}));
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(st[static_cast<size_t>(w)].code(), StatusCode::kInvalidArgument) << st[static_cast<size_t>(w)].to_string();
    EXPECT_NE(st[static_cast<size_t>(w)].message().find("disagree on the number of tokens"), std::string::npos)
        << st[static_cast<size_t>(w)].to_string();
  }
  // Node 1 agrees inside its TP group but its EP peers (node 0) left: an error too
  // (DeadlineExceeded at the latest), never a hang.
  for (int w = 2; w < 4; ++w) EXPECT_FALSE(st[static_cast<size_t>(w)].ok());
}

TEST(HybridMoeFused, ShardsNotMatchingTheConfigFailEveryRankOfTheTpGroup) {
  HybridLayer layer(3, false);
  Groups g(1.0);
  const auto st = per_rank(g, [&](int w) -> Status {
    RankSetup s = setup_rank(layer, g, w, {});
    if (w == 0) {  // rank 0's block with the FULL config but sharded weights
      s.block = std::make_unique<MoeBlock>(layer.config, s.shard->weights, &s.ctx, KernelOptions{}, 64);
    }
    s.block->set_tp(&g.tp_of(w));
    std::vector<float> x = random_rows(3, 1), attn = random_rows(3, 2);
    return s.block->forward_fused(0, TensorView::f32(attn.data(), {3, kH}), TensorView::f32(x.data(), {3, kH}));
  });
  EXPECT_EQ(st[0].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st[0].message().find("layer 0, expert 0"), std::string::npos) << st[0].to_string();
  EXPECT_NE(st[0].message().find("moe_intermediate_size 24"), std::string::npos) << st[0].to_string();
  EXPECT_EQ(st[1].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st[1].message().find("TP rank 0 rejected its expert shards"), std::string::npos) << st[1].to_string();
  for (int w = 2; w < 4; ++w) EXPECT_FALSE(st[static_cast<size_t>(w)].ok());
}

TEST(HybridMoeFused, RefusedWithoutTpGroupHierarchicalOrInForward) {
  HybridLayer layer(3, false);
  Groups g;
  const auto st = per_rank(g, [&](int w) -> Status {
    RankSetup s = setup_rank(layer, g, w, {});
    std::vector<float> x = random_rows(2, 1), attn = random_rows(2, 2);
    const TensorView xv = TensorView::f32(x.data(), {2, kH}), av = TensorView::f32(attn.data(), {2, kH});
    Status no_tp = s.block->forward_fused(0, av, xv);
    if (no_tp.code() != StatusCode::kFailedPrecondition || no_tp.message().find("set_tp") == std::string::npos) {
      return internal_error("without set_tp: " + no_tp.to_string());
    }
    s.ctx[0].expert_tp = &g.tp_of(w);
    Status in_forward = s.block->forward(0, av, xv);
    if (in_forward.code() != StatusCode::kFailedPrecondition || in_forward.message().find("expert_tp") == std::string::npos) {
      return internal_error("forward with expert_tp: " + in_forward.to_string());
    }
    s.ctx[0].options.hierarchical = true;
    s.block->set_tp(&g.tp_of(w));
    Status hier = s.block->forward_fused(0, av, xv);
    if (hier.code() != StatusCode::kFailedPrecondition || hier.message().find("hierarchical") == std::string::npos) {
      return internal_error("hierarchical: " + hier.to_string());
    }
    std::vector<float> out(x.size());
    auto ws = make_ep_workspace(s.shard->config, s.ctx[0], 2);
    Status layer_hier = ep_moe_forward(MoeLayerArgs::f32(s.shard->config, s.shard->weights.layers[0], x.data(), 2, out.data()),
                                       s.ctx[0], ws.get());
    if (layer_hier.code() != StatusCode::kFailedPrecondition) return internal_error("ep_moe_forward: " + layer_hier.to_string());
    return ok_status();
  });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.to_string();
}

}  // namespace
}  // namespace moe
