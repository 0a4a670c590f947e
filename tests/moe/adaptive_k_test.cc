// Adaptive top-k (adaptive_k.h) and the adaptive_requeue overflow policy (capacity.h):
// exact hand-computed cases, the refusals, and identical results for 1, 2 and 4 ranks
// (the same global batch split over ranks, through the in-process communicator).
#include "moe/moe/adaptive_k.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "moe/comm/inproc_communicator.h"
#include "moe/moe/capacity.h"
#include "moe/moe/router.h"

namespace moe {
namespace {

// 6 tokens, 4 experts, top-2; every token's second choice is expert 3 (token 5 has it
// first). Loads: e0 2, e1 2, e2 2, e3 6.
struct SkewCase {
  std::vector<int> idx = {0, 3, 1, 3, 2, 3, 0, 3, 1, 3, 3, 2};
  std::vector<float> w = {0.6f, 0.4f, 0.9f, 0.1f, 0.7f, 0.3f, 0.8f, 0.2f, 0.9f, 0.1f, 0.5f, 0.5f};
  TopkRouting routing() { return {idx.data(), w.data(), 6, 2}; }
};

AdaptiveKOptions adaptive(int min_k, int max_k, double factor, bool renormalize = true) {
  return {true, min_k, max_k, factor, renormalize};
}

StepRoutingCounts run(SkewCase& c, const CapacityOptions& opts) {
  StepRoutingCounts counts;
  EXPECT_TRUE(apply_capacity(opts, nullptr, 4, c.routing(), &counts).ok());
  return counts;
}

TEST(AdaptiveKTest, ShedsSmallestSharesOfTheOverloadedExpert) {
  // Target L = ceil(6 * 2 * 1.0 / 4) = 3; e3 has 6: sheds 3 of its slot-1 candidates,
  // shares t0 .4, t1 .1, t2 .3, t3 .2, t4 .1 (t5 holds e3 in slot 0: never a
  // candidate). Smallest first, the tie t1/t4 to the later token: t4, t1, t3.
  SkewCase c;
  const StepRoutingCounts k = run(c, {OverflowPolicy::kDropless, 1.0, adaptive(1, 2, 1.0)});
  EXPECT_EQ(c.idx, (std::vector<int>{0, 3, 1, -1, 2, 3, 0, -1, 1, -1, 3, 2}));
  EXPECT_EQ(k.adaptive_target, 3);
  EXPECT_EQ(k.adaptive_dropped, 3);
  EXPECT_EQ(k.adaptive_tokens, 3);
  EXPECT_EQ(k.tokens_per_expert, (std::vector<int64_t>{2, 2, 2, 3}));
  EXPECT_EQ(k.dropped, 0);
  // Renormalised (Mixtral's rule on the kept expert: weight 1); untouched tokens keep theirs.
  EXPECT_FLOAT_EQ(c.w[2], 1.0f);
  EXPECT_EQ(c.w[3], 0.0f);
  EXPECT_FLOAT_EQ(c.w[6], 1.0f);
  EXPECT_FLOAT_EQ(c.w[8], 1.0f);
  EXPECT_EQ(c.w[0], 0.6f);
  EXPECT_EQ(c.w[1], 0.4f);
  EXPECT_EQ(c.w[10], 0.5f);
}

TEST(AdaptiveKTest, LowerTargetShedsMoreAndNeverBelowMinK) {
  // F = 0.5: L = ceil(1.5) = 2, e3 sheds 4 of its 5 candidates: t4, t1, t3, then t2 (.3).
  SkewCase c;
  const StepRoutingCounts k = run(c, {OverflowPolicy::kDropless, 1.0, adaptive(1, 2, 0.5)});
  EXPECT_EQ(c.idx, (std::vector<int>{0, 3, 1, -1, 2, -1, 0, -1, 1, -1, 3, 2}));
  EXPECT_EQ(k.adaptive_target, 2);
  EXPECT_EQ(k.adaptive_dropped, 4);
  EXPECT_EQ(k.tokens_per_expert, (std::vector<int64_t>{2, 2, 2, 2}));
  // A tiny target (L = 1) sheds every candidate but never a slot 0: e3 loses all five
  // slot-1 holders (t5 keeps it in slot 0), e2 (2 > 1) t5's slot 1; e0, e1 have none.
  SkewCase d;
  const StepRoutingCounts m = run(d, {OverflowPolicy::kDropless, 1.0, adaptive(1, 2, 1e-9)});
  EXPECT_EQ(d.idx, (std::vector<int>{0, -1, 1, -1, 2, -1, 0, -1, 1, -1, 3, -1}));
  EXPECT_EQ(m.adaptive_target, 1);
  EXPECT_EQ(m.adaptive_dropped, 5 + 0 + 1);  // e3's five candidates, and e2 (2 > 1): t5's slot 1
  EXPECT_EQ(m.adaptive_tokens, 6);
  // min_k = 2 (= max_k): nothing can be shed, whatever the load.
  SkewCase e;
  const StepRoutingCounts n = run(e, {OverflowPolicy::kDropless, 1.0, adaptive(2, 2, 1e-9)});
  EXPECT_EQ(e.idx, SkewCase().idx);
  EXPECT_EQ(e.w, SkewCase().w);
  EXPECT_EQ(n.adaptive_dropped, 0);
}

TEST(AdaptiveKTest, MaxKCapsEveryTokenAndNoRenormalisationKeepsWeights) {
  // max_k = 1: every token keeps its slot 0 with weight 1 (Mixtral at k = 1); loads
  // e0 2, e1 2, e2 1, e3 1 against L = ceil(6 * 1 / 4) = 2: nothing shed.
  SkewCase c;
  const StepRoutingCounts k = run(c, {OverflowPolicy::kDropless, 1.0, adaptive(1, 1, 1.0)});
  EXPECT_EQ(c.idx, (std::vector<int>{0, -1, 1, -1, 2, -1, 0, -1, 1, -1, 3, -1}));
  for (int t = 0; t < 6; ++t) EXPECT_FLOAT_EQ(c.w[static_cast<size_t>(2 * t)], 1.0f) << t;
  EXPECT_EQ(k.adaptive_target, 2);
  EXPECT_EQ(k.adaptive_dropped, 0);
  EXPECT_EQ(k.tokens_per_expert, (std::vector<int64_t>{2, 2, 1, 1}));
  // Without renormalisation (Qwen without norm_topk_prob) the kept weights stay.
  SkewCase d;
  run(d, {OverflowPolicy::kDropless, 1.0, adaptive(1, 2, 1.0, false)});
  EXPECT_EQ(d.w, (std::vector<float>{0.6f, 0.4f, 0.9f, 0.0f, 0.7f, 0.3f, 0.8f, 0.0f, 0.9f, 0.0f, 0.5f, 0.5f}));
}

TEST(AdaptiveKTest, CapacityPolicyRunsOnTheReducedRouting) {
  // Shedding to L = 3 leaves e3 at 3 = the drop policy's capacity ceil(6 * 2 * 1 / 4):
  // nothing dropped. With F = 0.5 for the capacity (2) but 1.0 for adaptive k, e3's
  // third in global order (t0 s1, t2 s1, then t5's slot 0) is dropped.
  SkewCase c;
  const StepRoutingCounts k = run(c, {OverflowPolicy::kDrop, 1.0, adaptive(1, 2, 1.0)});
  EXPECT_EQ(k.dropped, 0);
  EXPECT_EQ(k.capacity, 3);
  SkewCase d;
  const StepRoutingCounts m = run(d, {OverflowPolicy::kDrop, 0.5, adaptive(1, 2, 1.0)});
  EXPECT_EQ(m.capacity, 2);
  EXPECT_EQ(m.adaptive_dropped, 3);
  EXPECT_EQ(m.dropped, 1);
  EXPECT_EQ(d.idx, (std::vector<int>{0, 3, 1, -1, 2, 3, 0, -1, 1, -1, -1, 2}));
  // The max_k cap sets the capacity's k: max_k 1 -> ceil(6 * 1 * 1 / 4) = 2.
  SkewCase e;
  EXPECT_EQ(run(e, {OverflowPolicy::kDrop, 1.0, adaptive(1, 1, 1.0)}).capacity, 2);
}

TEST(AdaptiveKTest, Validation) {
  EXPECT_TRUE(validate_adaptive_k({}, 2).ok());  // disabled: anything goes
  EXPECT_TRUE(validate_adaptive_k(adaptive(1, 0, 1.0), 2).ok());  // max_k 0 = top_k
  EXPECT_TRUE(validate_adaptive_k(adaptive(4, 8, 1.25), 8).ok());
  const auto msg = [](const AdaptiveKOptions& o, int k) { return validate_adaptive_k(o, k).message(); };
  EXPECT_NE(msg(adaptive(3, 2, 1.0), 8).find("min_k 3 exceeds max_k 2"), std::string::npos);
  EXPECT_NE(msg(adaptive(1, 3, 1.0), 2).find("max_k 3 exceeds the model's experts per token (2)"), std::string::npos);
  EXPECT_NE(msg(adaptive(3, 0, 1.0), 2).find("min_k 3 exceeds max_k 2"), std::string::npos);
  EXPECT_NE(msg(adaptive(0, 2, 1.0), 2).find("min_k must be >= 1"), std::string::npos);
  EXPECT_NE(msg(adaptive(1, 2, 0.0), 2).find("load target factor"), std::string::npos);
  EXPECT_NE(msg(adaptive(1, 2, std::nan("")), 2).find("load target factor"), std::string::npos);
}

// The capacity test's 6-token case: expert 0 is wanted by every token.
struct HandCase {
  std::vector<int> idx = {0, 1, 0, 2, 0, 3, 0, 1, 0, 2, 1, 0};
  std::vector<float> w = {0.6f, 0.4f, 0.7f, 0.3f, 0.8f, 0.2f, 0.9f, 0.1f, 0.5f, 0.5f, 0.55f, 0.45f};
};

TEST(AdaptiveRequeueTest, SecondRoundRunsTheOverflowOnItsOwnExpert) {
  // F = 1: capacity 3. Round 1 admits e0's t0, t1, t2 and overflows t3 s0, t4 s0, t5 s1;
  // the other experts leave 0 + 1 + 2 = 3 slots unused: all three run in round 2, on e0.
  HandCase h;
  StepRoutingCounts c;
  ASSERT_TRUE(apply_capacity({OverflowPolicy::kAdaptiveRequeue, 1.0}, nullptr, 4, {h.idx.data(), h.w.data(), 6, 2}, &c).ok());
  EXPECT_EQ(h.idx, HandCase().idx);
  EXPECT_EQ(h.w, HandCase().w);
  EXPECT_EQ(c.requeued, 3);
  EXPECT_EQ(c.dropped, 0);
  EXPECT_EQ(c.tokens_per_expert, (std::vector<int64_t>{6, 3, 2, 1}));
}

TEST(AdaptiveRequeueTest, BudgetIsTheUnusedRoomTakenInGlobalOrder) {
  // F = 0.5: capacity 2. Round 1: e0 admits t0, t1; e1 t0 s1, t3 s1; e2 t1 s1, t4 s1;
  // e3 t2 s1 (room 1). Overflow in order: t2 s0 (e0), t3 s0 (e0), t4 s0 (e0), t5 s0
  // (e1), t5 s1 (e0). Budget 1: t2 s0 runs; the other four are dropped.
  HandCase h;
  StepRoutingCounts c;
  ASSERT_TRUE(apply_capacity({OverflowPolicy::kAdaptiveRequeue, 0.5}, nullptr, 4, {h.idx.data(), h.w.data(), 6, 2}, &c).ok());
  EXPECT_EQ(h.idx, (std::vector<int>{0, 1, 0, 2, 0, 3, -1, 1, -1, 2, -1, -1}));
  EXPECT_EQ(h.w, (std::vector<float>{0.6f, 0.4f, 0.7f, 0.3f, 0.8f, 0.2f, 0.0f, 0.1f, 0.0f, 0.5f, 0.0f, 0.0f}));
  EXPECT_EQ(c.requeued, 1);
  EXPECT_EQ(c.dropped, 4);
  EXPECT_EQ(c.tokens_per_expert, (std::vector<int64_t>{3, 2, 2, 1}));
}

TEST(AdaptiveRequeueTest, SecondRoundHoldsAtMostOneCapacityPerExpert) {
  // 8 tokens, top-1, all on e0; capacity ceil(8 / 4) = 2. Budget 6 (e1-e3 unused), but
  // round 2 takes at most 2 more for e0: t2, t3 run, t4..t7 dropped.
  std::vector<int> idx(8, 0);
  std::vector<float> w(8, 1.0f);
  StepRoutingCounts c;
  ASSERT_TRUE(apply_capacity({OverflowPolicy::kAdaptiveRequeue, 1.0}, nullptr, 4, {idx.data(), w.data(), 8, 1}, &c).ok());
  EXPECT_EQ(idx, (std::vector<int>{0, 0, 0, 0, -1, -1, -1, -1}));
  EXPECT_EQ(c.requeued, 2);
  EXPECT_EQ(c.dropped, 4);
  EXPECT_EQ(c.tokens_per_expert, (std::vector<int64_t>{4, 0, 0, 0}));
  EXPECT_EQ(parse_overflow_policy("adaptive_requeue").value(), OverflowPolicy::kAdaptiveRequeue);
  EXPECT_STREQ(overflow_policy_name(OverflowPolicy::kAdaptiveRequeue), "adaptive_requeue");
}

struct RanksParam {
  OverflowPolicy policy;
  bool adaptive;
};

class AdaptiveRanksTest : public ::testing::TestWithParam<RanksParam> {};

TEST_P(AdaptiveRanksTest, IdenticalForAnyRankCount) {
  constexpr int kTokens = 61, kExperts = 8, kTopK = 3;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(kTokens * kExperts));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = dist(rng) + (i % kExperts == 5 ? 1.5f : 0.0f);  // skewed
  RouterConfig rc;
  rc.num_experts = kExperts;
  rc.top_k = kTopK;
  std::vector<int> idx0(static_cast<size_t>(kTokens * kTopK)), ranked(static_cast<size_t>(kTokens * kExperts));
  std::vector<float> w0(idx0.size());
  route_topk(rc, {logits.data()}, {idx0.data(), w0.data(), kTokens, kTopK, ranked.data()});
  // Equal weights on a few tokens: ties must break by global order on every rank.
  for (int t = 0; t < kTokens; t += 7) w0[static_cast<size_t>(t * kTopK + 2)] = w0[static_cast<size_t>(2)];

  int64_t requeued = 0;  // over the factors (at 0.4 no expert has room left to lend)
  for (double factor : {0.4, 0.8, 1.25}) {
    SCOPED_TRACE("factor " + std::to_string(factor));
    CapacityOptions opts{GetParam().policy, factor};
    if (GetParam().adaptive) opts.adaptive = adaptive(1, 3, factor);
    std::vector<int> want_idx = idx0;
    std::vector<float> want_w = w0;
    StepRoutingCounts want;
    ASSERT_TRUE(apply_capacity(opts, nullptr, kExperts, {want_idx.data(), want_w.data(), kTokens, kTopK, ranked.data()},
                               &want).ok());
    if (factor < 1.0) {
      EXPECT_GT(want.dropped + want.requeued + want.adaptive_dropped, 0);
      if (GetParam().adaptive) {
        EXPECT_GT(want.adaptive_dropped, 0);
      }
    }
    requeued += want.requeued;
    for (int R : {1, 2, 4}) {
      SCOPED_TRACE("ranks " + std::to_string(R));
      // Uneven split, rank 1 empty when R >= 2.
      std::vector<int> begin(static_cast<size_t>(R) + 1, 0);
      for (int r = 0; r < R; ++r) {
        const int b = begin[static_cast<size_t>(r)];
        begin[static_cast<size_t>(r) + 1] = r == R - 1 ? kTokens : (r == 1 ? b : b + kTokens / (R + 1) + r);
      }
      std::vector<int> got_idx = idx0;
      std::vector<float> got_w = w0;
      std::vector<StepRoutingCounts> counts(static_cast<size_t>(R));
      InProcessGroup group(R, 0, 20);
      const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
        const int r = comm.rank();
        const int t0 = begin[static_cast<size_t>(r)], n = begin[static_cast<size_t>(r) + 1] - t0;
        const TopkRouting mine{got_idx.data() + t0 * kTopK, got_w.data() + t0 * kTopK, n, kTopK,
                               ranked.data() + t0 * kExperts};
        return apply_capacity(opts, &comm, kExperts, mine, &counts[static_cast<size_t>(r)]);
      });
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(got_idx, want_idx);
      EXPECT_EQ(got_w, want_w);
      for (const auto& c : counts) {
        EXPECT_EQ(c.tokens_per_expert, want.tokens_per_expert);
        EXPECT_EQ(c.dropped, want.dropped);
        EXPECT_EQ(c.requeued, want.requeued);
        EXPECT_EQ(c.adaptive_dropped, want.adaptive_dropped);
        EXPECT_EQ(c.adaptive_tokens, want.adaptive_tokens);
        EXPECT_EQ(c.adaptive_target, want.adaptive_target);
      }
    }
  }
  if (GetParam().policy == OverflowPolicy::kAdaptiveRequeue) {
    EXPECT_GT(requeued, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, AdaptiveRanksTest,
                         ::testing::Values(RanksParam{OverflowPolicy::kAdaptiveRequeue, false},
                                           RanksParam{OverflowPolicy::kAdaptiveRequeue, true},
                                           RanksParam{OverflowPolicy::kDropless, true},
                                           RanksParam{OverflowPolicy::kReroute, true}),
                         [](const ::testing::TestParamInfo<RanksParam>& info) {
                           return std::string(overflow_policy_name(info.param.policy)) +
                                  (info.param.adaptive ? "_adaptive" : "");
                         });

}  // namespace
}  // namespace moe
