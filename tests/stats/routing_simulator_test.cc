// RoutingSimulator: Gumbel-top-k steps from per-expert totals (shapes, determinism, the
// sampler weights, the drop bound), and the helpers of `moe bench capacity`.
#include "moe/stats/routing_simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "contains_util.h"

namespace moe {
namespace {

RoutingSimulator make(std::vector<double> counts, int k, RoutingSampler s = RoutingSampler::kMatched) {
  auto r = RoutingSimulator::create(std::move(counts), k, s);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

TEST(RoutingSimulatorTest, StepShapesAndInvariants) {
  const RoutingSimulator sim = make({10, 5, 0, 1, 4, 20}, 2);
  EXPECT_EQ(sim.num_experts(), 6);
  EXPECT_EQ(sim.num_topk(), 2);
  SimulatedStep step;
  sim.sample_step(50, 7, &step);
  ASSERT_EQ(step.topk_idx.size(), 100u);
  ASSERT_EQ(step.ranked.size(), 300u);
  ASSERT_EQ(step.tokens_per_expert.size(), 6u);
  EXPECT_EQ(std::accumulate(step.tokens_per_expert.begin(), step.tokens_per_expert.end(), int64_t{0}), 100);
  EXPECT_EQ(step.tokens_per_expert[2], 0);  // weight 0: never in a top-2 while 5 others have weight
  std::vector<int64_t> recount(6, 0);
  for (int t = 0; t < 50; ++t) {
    const int* row = step.ranked.data() + t * 6;
    EXPECT_EQ(std::set<int>(row, row + 6).size(), 6u) << "token " << t << ": ranked is a permutation";
    EXPECT_EQ(row[5], 2) << "the zero-weight expert ranks last";
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(step.topk_idx[static_cast<size_t>(t * 2 + j)], row[j]);
      ++recount[static_cast<size_t>(row[j])];
    }
  }
  EXPECT_EQ(recount, step.tokens_per_expert);
}

TEST(RoutingSimulatorTest, DeterministicPerSeedAndBuffersReused) {
  const RoutingSimulator sim = make({3, 1, 1, 1}, 1);
  SimulatedStep a, b, c;
  sim.sample_step(64, 42, &a);
  sim.sample_step(64, 42, &b);
  sim.sample_step(64, 43, &c);
  EXPECT_EQ(a.ranked, b.ranked);
  EXPECT_NE(a.ranked, c.ranked);
  sim.sample_step(3, 42, &a);  // a smaller step into the same buffers
  EXPECT_EQ(a.topk_idx.size(), 3u);
  EXPECT_EQ(a.tokens_per_expert.size(), 4u);
  EXPECT_EQ(std::accumulate(a.tokens_per_expert.begin(), a.tokens_per_expert.end(), int64_t{0}), 3);
  EXPECT_EQ(std::vector<int>(a.topk_idx.begin(), a.topk_idx.end()),
            std::vector<int>(b.topk_idx.begin(), b.topk_idx.begin() + 3));  // same stream prefix
}

TEST(RoutingSimulatorTest, MatchedSamplerFollowsTheMeasuredMarginals) {
  // k = 2 of 4 experts, shares 0.4, 0.3, 0.2, 0.1: a token holds e with probability ~ k q_e.
  const std::vector<double> counts = {40, 30, 20, 10};
  const RoutingSimulator matched = make(counts, 2, RoutingSampler::kMatched);
  const RoutingSimulator share = make(counts, 2, RoutingSampler::kShare);
  SimulatedStep m, s;
  matched.sample_step(20000, 1, &m);
  share.sample_step(20000, 1, &s);
  const double hot_matched = static_cast<double>(m.tokens_per_expert[0]) / 20000;
  const double hot_share = static_cast<double>(s.tokens_per_expert[0]) / 20000;
  EXPECT_NEAR(hot_matched, 0.8, 0.05);
  EXPECT_LT(hot_share, hot_matched);  // plain shares flatten the skew
  EXPECT_GT(m.tokens_per_expert[0], m.tokens_per_expert[3]);
}

TEST(RoutingSimulatorTest, SharesImbalanceAndDropBound) {
  const RoutingSimulator sim = make({6, 2, 0, 0}, 1);
  EXPECT_EQ(sim.shares(), (std::vector<double>{0.75, 0.25, 0, 0}));
  EXPECT_DOUBLE_EQ(sim.imbalance(), 3.0);  // 6 / mean 2
  EXPECT_DOUBLE_EQ(sim.drop_bound(1.0), 0.5);  // max(0, .75 - .25)
  EXPECT_DOUBLE_EQ(sim.drop_bound(4.0), 0.0);
  EXPECT_NEAR(factor_for_one_percent([&](double f) { return sim.drop_bound(f); }, 4.0), 2.96, 1e-3);
  EXPECT_DOUBLE_EQ(factor_for_one_percent([](double) { return 0.5; }, 4.0), 4.0);  // never under 1%
}

TEST(RoutingSimulatorTest, BadArgumentsAreErrorsNamingThem) {
  auto empty = RoutingSimulator::create({}, 1, RoutingSampler::kMatched);
  EXPECT_CONTAINS(empty.status().message(), "counts is empty");
  auto k0 = RoutingSimulator::create({1, 2}, 0, RoutingSampler::kMatched);
  EXPECT_CONTAINS(k0.status().message(), "num_topk must be in [1, 2] (got 0)");
  auto k3 = RoutingSimulator::create({1, 2}, 3, RoutingSampler::kMatched);
  EXPECT_CONTAINS(k3.status().message(), "num_topk");
  auto neg = RoutingSimulator::create({1, -2}, 1, RoutingSampler::kMatched);
  EXPECT_CONTAINS(neg.status().message(), "counts[1]");
  auto zero = RoutingSimulator::create({0, 0}, 1, RoutingSampler::kShare);
  EXPECT_CONTAINS(zero.status().message(), "every count is zero");
  EXPECT_EQ(parse_routing_sampler("share").value(), RoutingSampler::kShare);
  EXPECT_EQ(parse_routing_sampler("matched").value(), RoutingSampler::kMatched);
  EXPECT_CONTAINS(parse_routing_sampler("uniform").status().message(), "'uniform'");
}

TEST(RoutingSimulatorTest, HelpersOfTheCapacityBench) {
  EXPECT_EQ(dropped_assignments({5, 1, 3, 0}, 2), 3 + 1);
  EXPECT_EQ(dropped_assignments({5, 1}, 10), 0);
  EXPECT_EQ(routing_step_seed("olmoe arxiv/L0/256/0", 1), routing_step_seed("olmoe arxiv/L0/256/0", 1));
  EXPECT_NE(routing_step_seed("olmoe arxiv/L0/256/0", 1), routing_step_seed("olmoe arxiv/L0/256/1", 1));
  EXPECT_NE(routing_step_seed("olmoe arxiv/L0/256/0", 1), routing_step_seed("olmoe arxiv/L0/256/0", 2));
}

}  // namespace
}  // namespace moe
