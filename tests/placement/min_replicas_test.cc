// The planner's min_replicas floor (fault tolerance): every expert on >= k distinct ranks
// (and, without groups, on >= min(k, nodes) nodes) for both algorithms, with and without
// expert groups, on uniform, skewed and zero loads; losing any k - 1 ranks (checked
// exhaustively) or, with k >= 2, any one node leaves every expert a live replica; exact
// small cases; each validation error by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "contains_util.h"
#include "moe/placement/replica_planner.h"

namespace moe {
namespace {

struct Case {
  int E, R, S, N, G, k, cap;
  PlannerAlgorithm algorithm;
};

std::string describe(const Case& c) {
  return "E=" + std::to_string(c.E) + " R=" + std::to_string(c.R) + " S=" + std::to_string(c.S) +
         " N=" + std::to_string(c.N) + " G=" + std::to_string(c.G) + " k=" + std::to_string(c.k) +
         " cap=" + std::to_string(c.cap) + (c.algorithm == PlannerAlgorithm::kEplb ? " eplb" : " balanced");
}

PlannerInput input_for(const Case& c, std::vector<std::vector<double>> load) {
  PlannerInput in;
  in.load = std::move(load);
  in.num_ranks = c.R;
  in.num_nodes = c.N;
  in.slots_per_rank = c.S;
  in.replica_cap = c.cap;
  in.num_groups = c.G;
  in.min_replicas = c.k;
  in.algorithm = c.algorithm;
  return in;
}

// Loads: uniform, one very hot expert, a lognormal tail with zeros, all zero.
std::vector<std::vector<double>> loads_for(int E, std::mt19937* rng) {
  std::vector<std::vector<double>> load;
  load.emplace_back(static_cast<size_t>(E), 1.0);
  std::vector<double> hot(static_cast<size_t>(E), 1.0);
  hot[static_cast<size_t>(E / 2)] = 1000.0;
  load.push_back(hot);
  std::lognormal_distribution<double> heavy(0.0, 2.0);
  std::vector<double> tail(static_cast<size_t>(E));
  for (size_t e = 0; e < tail.size(); ++e) tail[e] = e % 5 == 3 ? 0.0 : std::floor(100 * heavy(*rng));
  load.push_back(tail);
  load.emplace_back(static_cast<size_t>(E), 0.0);
  return load;
}

// Every subset of `size` ranks out of R (as bitmasks).
std::vector<uint32_t> subsets(int R, int size) {
  std::vector<uint32_t> out;
  for (uint32_t m = 0; m < (1u << R); ++m) {
    if (__builtin_popcount(m) == size) out.push_back(m);
  }
  return out;
}

// The checks of the header's contract on one plan.
void check_plan(const Case& c, const PlacementPlan& p) {
  ASSERT_TRUE(validate_plan(p).ok()) << validate_plan(p).to_string();
  const int rpn = c.R / c.N;
  for (const LayerPlan& L : p.layers) {
    SCOPED_TRACE("layer " + std::to_string(L.layer));
    std::vector<int> count(static_cast<size_t>(c.E), 0);
    std::vector<std::set<int>> nodes(static_cast<size_t>(c.E));
    for (int r = 0; r < c.R; ++r) {
      const auto& slots = L.rank_slots[static_cast<size_t>(r)];
      EXPECT_LE(static_cast<int>(slots.size()), c.S);
      EXPECT_EQ(std::set<int>(slots.begin(), slots.end()).size(), slots.size());  // distinct ranks
      for (int e : slots) {
        ++count[static_cast<size_t>(e)];
        nodes[static_cast<size_t>(e)].insert(r / rpn);
      }
    }
    for (int e = 0; e < c.E; ++e) {
      EXPECT_GE(count[static_cast<size_t>(e)], c.k) << "expert " << e;
      EXPECT_LE(count[static_cast<size_t>(e)], std::min(c.cap, c.R)) << "expert " << e;
      if (c.G == 0) {
        EXPECT_GE(static_cast<int>(nodes[static_cast<size_t>(e)].size()), std::min(c.k, c.N)) << "expert " << e;
      } else {
        EXPECT_EQ(nodes[static_cast<size_t>(e)].size(), 1u) << "expert " << e << ": group split over nodes";
      }
    }
    // Exhaustively: any k - 1 ranks down, every expert still has a live replica.
    for (uint32_t dead : subsets(c.R, c.k - 1)) {
      for (int e = 0; e < c.E; ++e) {
        bool live = false;
        for (int r = 0; r < c.R && !live; ++r) {
          if ((dead >> r & 1u) == 0) {
            const auto& slots = L.rank_slots[static_cast<size_t>(r)];
            live = std::find(slots.begin(), slots.end(), e) != slots.end();
          }
        }
        EXPECT_TRUE(live) << "expert " << e << " lost with dead ranks mask " << dead;
      }
    }
    // Without groups and k >= 2: any one node down, every expert still has a replica.
    if (c.G == 0 && c.k >= 2 && c.N >= 2) {
      for (int n = 0; n < c.N; ++n) {
        for (int e = 0; e < c.E; ++e) {
          const auto& ns = nodes[static_cast<size_t>(e)];
          EXPECT_TRUE(ns.size() > 1 || ns.count(n) == 0) << "expert " << e << " lost with node " << n;
        }
      }
    }
  }
}

TEST(MinReplicasTest, EveryExpertKeepsKReplicasAcrossShapes) {
  std::mt19937 rng(2026);
  std::vector<Case> cases;
  for (auto algo : {PlannerAlgorithm::kBalanced, PlannerAlgorithm::kEplb}) {
    cases.push_back({4, 2, 4, 1, 0, 2, 4, algo});    // every rank holds every expert
    cases.push_back({8, 2, 8, 1, 0, 2, 2, algo});
    cases.push_back({8, 4, 4, 1, 0, 2, 4, algo});    // no spare slot beyond the floor
    cases.push_back({8, 4, 5, 2, 0, 2, 4, algo});    // two nodes
    cases.push_back({8, 4, 6, 2, 0, 3, 4, algo});    // k = 3 on 2 nodes
    cases.push_back({16, 8, 6, 4, 0, 2, 4, algo});   // four nodes
    cases.push_back({16, 8, 7, 2, 0, 3, 3, algo});   // any two ranks down
    cases.push_back({12, 6, 5, 3, 0, 2, 4, algo});   // three nodes
    cases.push_back({8, 4, 4, 2, 2, 2, 4, algo});    // groups: k = ranks per node
    cases.push_back({16, 8, 6, 2, 4, 3, 4, algo});   // groups, k = 3 of 4 ranks per node
    cases.push_back({32, 8, 9, 2, 0, 2, 4, algo});
    cases.push_back({6, 3, 6, 1, 0, 3, 3, algo});    // every rank holds every expert
    cases.push_back({8, 4, 3, 1, 0, 1, 4, algo});    // k = 1: the old behaviour
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    auto p = plan_placement(input_for(c, loads_for(c.E, &rng)));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    check_plan(c, *p);
  }
}

TEST(MinReplicasTest, RandomShapes) {
  std::mt19937 rng(99);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int planned = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int R = uni(2, 10);
    std::vector<int> divisors;
    for (int n = 1; n <= R; ++n) {
      if (R % n == 0) divisors.push_back(n);
    }
    const int N = divisors[static_cast<size_t>(uni(0, static_cast<int>(divisors.size()) - 1))];
    const int E = uni(2, 24);
    const int cap = uni(2, 5);
    const int k = uni(2, std::min({cap, R, 3}));
    const int S = std::min(E, (E * k + R - 1) / R + uni(0, 3));
    for (auto algo : {PlannerAlgorithm::kBalanced, PlannerAlgorithm::kEplb}) {
      const Case c{E, R, S, N, 0, k, cap, algo};
      SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(c));
      auto p = plan_placement(input_for(c, loads_for(E, &rng)));
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      check_plan(c, *p);
      ++planned;
    }
  }
  EXPECT_EQ(planned, 120);
}

TEST(MinReplicasTest, ExactSmallCases) {
  // 4 experts, 2 ranks x 4 slots, k = 2: the floor alone takes all 8 slots, so every
  // rank holds every expert, whatever the load, and each rank carries half of the total.
  for (auto algo : {PlannerAlgorithm::kBalanced, PlannerAlgorithm::kEplb}) {
    PlannerInput in;
    in.load = {{10, 1, 1, 1}, {0, 0, 0, 0}};
    in.num_ranks = 2;
    in.slots_per_rank = 4;
    in.min_replicas = 2;
    in.algorithm = algo;
    auto p = plan_placement(in);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    for (const LayerPlan& L : p->layers) {
      EXPECT_EQ(L.rank_slots, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {0, 1, 2, 3}}));
      EXPECT_EQ(L.replica_count, (std::vector<int>{2, 2, 2, 2}));
    }
    const auto loads = rank_loads(p->layers[0], in.load[0], 2);
    EXPECT_DOUBLE_EQ(loads[0], 6.5);
    EXPECT_DOUBLE_EQ(loads[1], 6.5);
  }
  // 4 experts on 2 nodes x 2 ranks x 2 slots, k = 2: 8 slots, so exactly two replicas
  // each, and on two different nodes.
  PlannerInput in;
  in.load = {{1, 1, 1, 1}};
  in.num_ranks = 4;
  in.num_nodes = 2;
  in.slots_per_rank = 2;
  in.min_replicas = 2;
  auto p = plan_placement(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->layers[0].replica_count, (std::vector<int>{2, 2, 2, 2}));
  for (int e = 0; e < 4; ++e) {
    std::set<int> nodes;
    for (int r = 0; r < 4; ++r) {
      const auto& s = p->layers[0].rank_slots[static_cast<size_t>(r)];
      if (std::find(s.begin(), s.end(), e) != s.end()) nodes.insert(r / 2);
    }
    EXPECT_EQ(nodes, (std::set<int>{0, 1})) << "expert " << e;
  }
}

TEST(MinReplicasTest, LocalSearchNeverDropsBelowTheFloor) {
  // [49,25,25,1] on 3 ranks x 3 slots, cap 3: with k = 1 the balanced planner leaves
  // some expert at one copy (dropping replicas that only fill slots); with k = 2 every
  // expert keeps two under both algorithms.
  PlannerInput in;
  in.load = {{49, 25, 25, 1}};
  in.num_ranks = 3;
  in.slots_per_rank = 3;
  in.replica_cap = 3;
  auto one = plan_placement(in);
  ASSERT_TRUE(one.ok());
  const auto& c1 = one->layers[0].replica_count;
  EXPECT_EQ(*std::min_element(c1.begin(), c1.end()), 1);  // the floor is what keeps k = 2
  in.min_replicas = 2;
  for (auto algo : {PlannerAlgorithm::kBalanced, PlannerAlgorithm::kEplb}) {
    in.algorithm = algo;
    auto two = plan_placement(in);
    ASSERT_TRUE(two.ok()) << two.status().to_string();
    const auto& c2 = two->layers[0].replica_count;
    EXPECT_GE(*std::min_element(c2.begin(), c2.end()), 2);
    check_plan({4, 3, 3, 1, 0, 2, 3, algo}, *two);
  }
}

void expect_invalid(const PlannerInput& in, std::initializer_list<std::string> needles) {
  const Status st = validate_planner_input(in);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  for (const auto& n : needles) EXPECT_CONTAINS(st.message(), n);
  auto p = plan_placement(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), st.message());
}

TEST(MinReplicasTest, BadInput) {
  PlannerInput in;
  in.load = {{1, 2, 3, 4, 5, 6, 7, 8}};
  in.num_ranks = 4;
  in.num_nodes = 2;
  in.slots_per_rank = 4;
  in.replica_cap = 3;
  in.min_replicas = 0;
  expect_invalid(in, {"min_replicas must be >= 1 (got 0)"});
  in.min_replicas = -2;
  expect_invalid(in, {"min_replicas must be >= 1 (got -2)"});
  in.min_replicas = 4;
  expect_invalid(in, {"min_replicas 4 exceeds replica_cap 3"});
  in.replica_cap = 8;
  in.min_replicas = 5;
  expect_invalid(in, {"min_replicas 5 exceeds num_ranks 4"});
  in.min_replicas = 3;
  in.num_groups = 2;
  expect_invalid(in, {"min_replicas 3 exceeds the 2 ranks per node", "num_groups"});
  in.num_groups = 0;
  // 8 experts x 3 = 24 slots needed, 4 x 4 = 16 there.
  expect_invalid(in, {"min_replicas 3: not enough slots: need 24", "have 16", "slots_per_rank >= 6"});
  in.slots_per_rank = 6;
  EXPECT_TRUE(validate_planner_input(in).ok());
  EXPECT_TRUE(plan_placement(in).ok());
}

}  // namespace
}  // namespace moe
