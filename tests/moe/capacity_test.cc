// apply_capacity: exact hand-computed drop and reroute cases (a batch that overflows
// one expert by a known amount), and identical results for 1, 2 and 4 ranks (the same
// global batch split over ranks, through the in-process communicator).
#include "moe/moe/capacity.h"

#include <gtest/gtest.h>

#include <mutex>
#include <numeric>
#include <random>
#include <vector>

#include "moe/comm/inproc_communicator.h"
#include "moe/moe/router.h"

namespace moe {
namespace {

TEST(CapacityTest, CapacityFormula) {
  EXPECT_EQ(expert_capacity(6, 2, 4, 1.0), 3);   // ceil(3)
  EXPECT_EQ(expert_capacity(6, 2, 4, 0.5), 2);   // ceil(1.5)
  EXPECT_EQ(expert_capacity(7, 2, 4, 1.0), 4);   // ceil(3.5)
  EXPECT_EQ(expert_capacity(0, 2, 4, 1.0), 0);
  EXPECT_EQ(expert_capacity(4096, 8, 256, 1.25), 160);
  // Clamped to the token count: a huge factor means "no limit", never an overflow.
  EXPECT_EQ(expert_capacity(6, 2, 4, 3.0), 6);
  EXPECT_EQ(expert_capacity(6, 2, 4, 1e30), 6);
}

TEST(CapacityTest, HugeFactorDropsNothing) {
  std::vector<int> idx = {0, 1, 0, 1};
  std::vector<float> w = {0.5f, 0.5f, 0.5f, 0.5f};
  StepRoutingCounts c;
  ASSERT_TRUE(apply_capacity({OverflowPolicy::kDrop, 1e30}, nullptr, 4, {idx.data(), w.data(), 2, 2}, &c).ok());
  EXPECT_EQ(idx, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(c.dropped, 0);
  EXPECT_EQ(c.capacity, 2);
}

TEST(CapacityTest, PolicyNamesAndValidation) {
  EXPECT_EQ(parse_overflow_policy("drop").value(), OverflowPolicy::kDrop);
  EXPECT_EQ(parse_overflow_policy("reroute").value(), OverflowPolicy::kReroute);
  EXPECT_EQ(parse_overflow_policy("dropless").value(), OverflowPolicy::kDropless);
  auto bad = parse_overflow_policy("spill");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'spill'"), std::string::npos);
  EXPECT_FALSE(validate_capacity_options({OverflowPolicy::kDrop, -1.0}).ok());
  EXPECT_FALSE(validate_capacity_options({OverflowPolicy::kReroute, 0.0}).ok());
  EXPECT_FALSE(validate_capacity_options({OverflowPolicy::kDrop, std::nan("")}).ok());
  EXPECT_TRUE(validate_capacity_options({OverflowPolicy::kDropless, -1.0}).ok());  // factor unused
}

// 6 tokens, 4 experts, top-2. Expert 0 is wanted by every token.
struct HandCase {
  std::vector<int> idx = {0, 1, 0, 2, 0, 3, 0, 1, 0, 2, 1, 0};
  std::vector<float> w = {0.6f, 0.4f, 0.7f, 0.3f, 0.8f, 0.2f, 0.9f, 0.1f, 0.5f, 0.5f, 0.55f, 0.45f};
  // Selection order of every expert per token (the top-2 first).
  std::vector<int> ranked = {0, 1, 2, 3,  0, 2, 1, 3,  0, 3, 1, 2,  0, 1, 2, 3,  0, 2, 1, 3,  1, 0, 3, 2};
};

StepRoutingCounts run(HandCase& h, OverflowPolicy policy, double factor) {
  StepRoutingCounts counts;
  const TopkRouting routing{h.idx.data(), h.w.data(), 6, 2, h.ranked.data()};
  EXPECT_TRUE(apply_capacity({policy, factor}, nullptr, 4, routing, &counts).ok());
  return counts;
}

TEST(CapacityTest, DroplessKeepsEverythingAndCounts) {
  HandCase h;
  const auto before = h.idx;
  const StepRoutingCounts c = run(h, OverflowPolicy::kDropless, 1.0);
  EXPECT_EQ(h.idx, before);
  EXPECT_EQ(c.tokens_per_expert, (std::vector<int64_t>{6, 3, 2, 1}));
  EXPECT_EQ(c.capacity, -1);
  EXPECT_EQ(c.dropped, 0);
  EXPECT_EQ(c.global_tokens, 6);
}

TEST(CapacityTest, DropSkipsOverflowInTokenOrder) {
  // capacity = ceil(6 * 2 * 1.0 / 4) = 3: expert 0 admits tokens 0, 1, 2 and drops its
  // assignments of tokens 3, 4, 5 (overflow by exactly 3); weights are not renormalised.
  HandCase h;
  const StepRoutingCounts c = run(h, OverflowPolicy::kDrop, 1.0);
  EXPECT_EQ(c.capacity, 3);
  EXPECT_EQ(c.dropped, 3);
  EXPECT_EQ(c.rerouted, 0);
  EXPECT_EQ(c.tokens_per_expert, (std::vector<int64_t>{3, 3, 2, 1}));
  EXPECT_EQ(h.idx, (std::vector<int>{0, 1, 0, 2, 0, 3, -1, 1, -1, 2, 1, -1}));
  EXPECT_EQ(h.w, (std::vector<float>{0.6f, 0.4f, 0.7f, 0.3f, 0.8f, 0.2f, 0.0f, 0.1f, 0.0f, 0.5f, 0.55f, 0.0f}));
}

TEST(CapacityTest, RerouteMovesOverflowToNextExpertWithRoom) {
  // capacity 3; room after admission: expert 2 has 1, expert 3 has 2.
  //   token 3 (0 overflows): candidates 2, 3 -> 2 (room left 0)
  //   token 4 (0 overflows): candidates 1 (full), 3 -> 3
  //   token 5 (0 overflows): candidates 3, 2 -> 3
  HandCase h;
  const StepRoutingCounts c = run(h, OverflowPolicy::kReroute, 1.0);
  EXPECT_EQ(c.rerouted, 3);
  EXPECT_EQ(c.dropped, 0);
  EXPECT_EQ(c.tokens_per_expert, (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(h.idx, (std::vector<int>{0, 1, 0, 2, 0, 3, 2, 1, 3, 2, 1, 3}));
  // Weights travel with the assignment.
  EXPECT_EQ(h.w, (std::vector<float>{0.6f, 0.4f, 0.7f, 0.3f, 0.8f, 0.2f, 0.9f, 0.1f, 0.5f, 0.5f, 0.55f, 0.45f}));
}

TEST(CapacityTest, RerouteDropsWhenNoExpertHasRoom) {
  // capacity = ceil(1.5) = 2. Admitted: expert 0 tokens 0,1; expert 1 tokens 0,3;
  // experts 2 (tokens 1,4) and 3 (token 2). Room: only expert 3, one slot.
  // Overflow order: t2 (e0) -> cand 1, 2: none; t3 (e0) -> 2, 3 -> 3; t4 (e0) -> 1, 3:
  // none; t5 slot 0 (e1) -> 3, 2: none; t5 slot 1 (e0): none.
  HandCase h;
  const StepRoutingCounts c = run(h, OverflowPolicy::kReroute, 0.5);
  EXPECT_EQ(c.capacity, 2);
  EXPECT_EQ(c.rerouted, 1);
  EXPECT_EQ(c.dropped, 4);
  EXPECT_EQ(c.tokens_per_expert, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(h.idx, (std::vector<int>{0, 1, 0, 2, -1, 3, 3, 1, -1, 2, -1, -1}));
}

TEST(CapacityTest, RerouteNeverGivesATokenTheSameExpertTwice) {
  // One token, top-2 of 4, both experts full (capacity 0 is impossible: use 4 tokens
  // that all want experts 0 and 1 with capacity ceil(4*2*0.25/4) = 1).
  std::vector<int> idx = {0, 1, 0, 1, 0, 1, 0, 1};
  std::vector<float> w(8, 0.5f);
  std::vector<int> ranked;
  for (int t = 0; t < 4; ++t) ranked.insert(ranked.end(), {0, 1, 2, 3});
  StepRoutingCounts c;
  const TopkRouting routing{idx.data(), w.data(), 4, 2, ranked.data()};
  ASSERT_TRUE(apply_capacity({OverflowPolicy::kReroute, 0.25}, nullptr, 4, routing, &c).ok());
  // Token 0 keeps 0, 1; token 1's two overflowing slots go to 2 and 3 (not 2 twice);
  // tokens 2 and 3 find nothing.
  EXPECT_EQ(idx, (std::vector<int>{0, 1, 2, 3, -1, -1, -1, -1}));
  EXPECT_EQ(c.rerouted, 2);
  EXPECT_EQ(c.dropped, 4);
}

// The same global batch split over 1, 2 and 4 ranks gives the same routing for every
// token and the same global counts.
class CapacityRanksTest : public ::testing::TestWithParam<OverflowPolicy> {};

TEST_P(CapacityRanksTest, IdenticalForAnyRankCount) {
  constexpr int kTokens = 53, kExperts = 8, kTopK = 2;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(kTokens * kExperts));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = dist(rng) + (i % kExperts == 3 ? 2.0f : 0.0f);  // skewed
  RouterConfig rc;
  rc.num_experts = kExperts;
  rc.top_k = kTopK;
  std::vector<int> idx0(static_cast<size_t>(kTokens * kTopK)), ranked(static_cast<size_t>(kTokens * kExperts));
  std::vector<float> w0(idx0.size());
  route_topk(rc, {logits.data()}, {idx0.data(), w0.data(), kTokens, kTopK, ranked.data()});

  for (double factor : {0.5, 1.0, 1.25}) {
    SCOPED_TRACE("factor " + std::to_string(factor));
    const CapacityOptions opts{GetParam(), factor};
    std::vector<int> want_idx = idx0;
    std::vector<float> want_w = w0;
    StepRoutingCounts want;
    const TopkRouting all{want_idx.data(), want_w.data(), kTokens, kTopK, ranked.data()};
    ASSERT_TRUE(apply_capacity(opts, nullptr, kExperts, all, &want).ok());
    if (GetParam() != OverflowPolicy::kDropless && factor < 1.0) {
      EXPECT_GT(want.dropped + want.rerouted, 0);
    }

    for (int R : {1, 2, 4}) {
      SCOPED_TRACE("ranks " + std::to_string(R));
      // Uneven split, rank 1 empty when R >= 2.
      std::vector<int> begin(static_cast<size_t>(R) + 1, 0);
      for (int r = 0; r < R; ++r) begin[static_cast<size_t>(r) + 1] = r == R - 1 ? kTokens : (r == 1 ? begin[static_cast<size_t>(r)] : begin[static_cast<size_t>(r)] + kTokens / (R + 1) + r);
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
        EXPECT_EQ(c.rerouted, want.rerouted);
        EXPECT_EQ(c.global_tokens, kTokens);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, CapacityRanksTest,
                         ::testing::Values(OverflowPolicy::kDropless, OverflowPolicy::kDrop, OverflowPolicy::kReroute),
                         [](const ::testing::TestParamInfo<OverflowPolicy>& info) {
                           return std::string(overflow_policy_name(info.param));
                         });

}  // namespace
}  // namespace moe
