// The placement planner: exact hand cases, invariants on random inputs, metrics, the
// lower bound, load-file parsing and bad input.
#include "moe/placement/replica_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "contains_util.h"

namespace moe {
namespace {

PlannerInput input(std::vector<std::vector<double>> load, int ranks, int nodes, int slots, int cap = 4) {
  PlannerInput in;
  in.load = std::move(load);
  in.num_ranks = ranks;
  in.num_nodes = nodes;
  in.slots_per_rank = slots;
  in.replica_cap = cap;
  return in;
}

PlacementPlan plan_or_die(const PlannerInput& in) {
  auto p = plan_placement(in);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(p).value() : PlacementPlan{};
}

double max_rank_load(const PlacementPlan& p, const std::vector<double>& load, int layer = 0) {
  auto r = rank_loads(p.layers[static_cast<size_t>(layer)], load, p.num_ranks);
  return *std::max_element(r.begin(), r.end());
}

TEST(PlannerTest, HotExpertIsReplicatedAndBalancedExactly) {
  // 4 experts, loads [10,1,1,1], 2 ranks x 3 slots, cap 4 (effectively 2: replicas on
  // distinct ranks). Greedy replication: expert 0 -> 2 copies (5 each), then expert 1
  // (load 1) -> 2 copies (0.5 each). Packing: {0,2,1} and {0,3,1} = 6.5 each = 13 / 2.
  const std::vector<double> load = {10, 1, 1, 1};
  for (auto algo : {PlannerAlgorithm::kBalanced, PlannerAlgorithm::kEplb}) {
    PlannerInput in = input({load}, 2, 1, 3);
    in.algorithm = algo;
    PlacementPlan p = plan_or_die(in);
    ASSERT_EQ(p.layers.size(), 1u);
    EXPECT_EQ(p.layers[0].replica_count, (std::vector<int>{2, 2, 1, 1}));
    EXPECT_EQ(p.layers[0].rank_slots, (std::vector<std::vector<int>>{{0, 1, 2}, {0, 1, 3}}));
    EXPECT_DOUBLE_EQ(max_rank_load(p, load), 6.5);
    LayerMetrics m = evaluate_layer(p.layers[0], load, 2, 1);
    EXPECT_DOUBLE_EQ(m.max_over_mean, 1.0);
    EXPECT_DOUBLE_EQ(m.mean_load, 6.5);
  }
  // Before: contiguous {0,1} = 11 and {2,3} = 2.
  PlacementPlan before = contiguous_plan(4, 2, {});
  EXPECT_DOUBLE_EQ(max_rank_load(before, load), 11.0);
}

TEST(PlannerTest, NoSpareSlotIsPurePacking) {
  // [8,4,2,2] on 2 ranks x 2 slots: no replica fits; best is {8,2} | {4,2} = 10, which is
  // the bound "hottest + coldest" too. Contiguous gives {8,4} = 12.
  const std::vector<double> load = {8, 4, 2, 2};
  PlacementPlan p = plan_or_die(input({load}, 2, 1, 2));
  EXPECT_DOUBLE_EQ(max_rank_load(p, load), 10.0);
  EXPECT_EQ(p.layers[0].replica_count, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(max_load_lower_bound(load, 2, 2, 4), 10.0);
  EXPECT_DOUBLE_EQ(max_rank_load(contiguous_plan(4, 2, {}), load), 12.0);
}

TEST(PlannerTest, LocalSearchBeatsPlainLpt) {
  // Classic LPT trap: [3,3,2,2,2] on 2 ranks, cap 1 (no replicas). LPT (the EPLB-style
  // baseline) gives {3,2,2} = 7 | {3,2} = 5; a swap reaches {3,3} | {2,2,2} = 6.
  const std::vector<double> load = {3, 3, 2, 2, 2};
  PlannerInput in = input({load}, 2, 1, 3, /*cap=*/1);
  in.algorithm = PlannerAlgorithm::kEplb;
  EXPECT_DOUBLE_EQ(max_rank_load(plan_or_die(in), load), 7.0);
  in.algorithm = PlannerAlgorithm::kBalanced;
  PlacementPlan p = plan_or_die(in);
  EXPECT_DOUBLE_EQ(max_rank_load(p, load), 6.0);
  EXPECT_EQ(p.layers[0].rank_slots, (std::vector<std::vector<int>>{{2, 3, 4}, {0, 1}}));
}

TEST(PlannerTest, FreeSlotsBeatFillingEverySlot) {
  // [49,25,25,1] on 2 ranks x 3 slots, cap 2 (mean 50). Greedy replication fills every
  // slot (expert 0 -> 2 x 24.5, expert 1 -> 2 x 12.5) and plain packing reaches 62; one
  // copy each packs to {49,1} | {25,25} = 50 with two slots free, and the local search's
  // drop/add moves reach 50 from the greedy counts too.
  const std::vector<double> load = {49, 25, 25, 1};
  PlannerInput in = input({load}, 2, 1, 3, /*cap=*/2);
  in.algorithm = PlannerAlgorithm::kEplb;
  PlacementPlan eplb = plan_or_die(in);
  EXPECT_DOUBLE_EQ(max_rank_load(eplb, load), 62.0);
  EXPECT_EQ(eplb.layers[0].replica_count, (std::vector<int>{2, 2, 1, 1}));
  in.algorithm = PlannerAlgorithm::kBalanced;
  PlacementPlan p = plan_or_die(in);
  EXPECT_DOUBLE_EQ(max_rank_load(p, load), 50.0);
}

TEST(PlannerTest, ReplicasSpreadOverNodes) {
  // 2 nodes x 2 ranks, 2 slots each, one hot expert: its replicas go to both nodes, so
  // none of its tokens cross; the planner never does worse on crossing than one copy.
  const std::vector<double> load = {100, 1, 1, 1};
  PlacementPlan p = plan_or_die(input({load}, 4, 2, 2));
  const LayerPlan& L = p.layers[0];
  EXPECT_EQ(L.replica_count[0], 4);
  LayerMetrics m = evaluate_layer(L, load, 4, 2);
  LayerMetrics before = evaluate_layer(contiguous_plan(4, 4, {}).layers[0], load, 4, 2);
  EXPECT_DOUBLE_EQ(before.cross_node_share, 0.5);
  EXPECT_LT(m.cross_node_share, 0.02);  // only the cold experts' tokens may cross
  EXPECT_LT(m.max_over_mean, before.max_over_mean);
}

TEST(PlannerTest, EvaluateLayerExact) {
  // Ranks 0,1 on node 0; ranks 2,3 on node 1. Expert 0 has 3 replicas (one on each node).
  LayerPlan L;
  L.rank_slots = {{0, 1}, {0}, {0, 2}, {3}};
  L.replica_count = {3, 1, 1, 1};
  const std::vector<double> load = {4, 2, 1, 1};
  auto r = rank_loads(L, load, 4);
  EXPECT_DOUBLE_EQ(r[0], 4.0 / 3 + 2);
  EXPECT_DOUBLE_EQ(r[1], 4.0 / 3);
  EXPECT_DOUBLE_EQ(r[2], 4.0 / 3 + 1);
  EXPECT_DOUBLE_EQ(r[3], 1.0);
  LayerMetrics m = evaluate_layer(L, load, 4, 2);
  EXPECT_DOUBLE_EQ(m.total_load, 8);
  EXPECT_DOUBLE_EQ(m.mean_load, 2);
  EXPECT_DOUBLE_EQ(m.max_load, 4.0 / 3 + 2);
  EXPECT_DOUBLE_EQ(m.max_over_mean, (4.0 / 3 + 2) / 2);
  // Expert 0 is on both nodes (0 crossing); 1 only on node 0, 2 and 3 only on node 1:
  // (2 + 1 + 1) * (1/2) / 8.
  EXPECT_DOUBLE_EQ(m.cross_node_share, 0.25);
  EXPECT_DOUBLE_EQ(evaluate_layer(L, load, 4, 1).cross_node_share, 0.0);
  // No load at all: balanced by definition.
  EXPECT_DOUBLE_EQ(evaluate_layer(L, {0, 0, 0, 0}, 4, 2).max_over_mean, 1.0);
}

TEST(PlannerTest, ContiguousPlan) {
  PlacementPlan p = contiguous_plan(8, 3, {5, 9});
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_EQ(p.layers[1].layer, 9);
  EXPECT_EQ(p.layers[0].rank_slots, (std::vector<std::vector<int>>{{0, 1}, {2, 3, 4}, {5, 6, 7}}));
  EXPECT_EQ(p.slots_per_rank, 3);
  EXPECT_TRUE(validate_plan(p).ok());
}

TEST(PlannerTest, LowerBound) {
  // total 13 / 2 ranks = 6.5; hottest 10 over at most 2 replicas = 5.
  EXPECT_DOUBLE_EQ(max_load_lower_bound({10, 1, 1, 1}, 2, 3, 4), 6.5);
  // cap 1: the hottest alone.
  EXPECT_DOUBLE_EQ(max_load_lower_bound({10, 1, 1, 1}, 2, 3, 1), 10.0);
  // No spare slot: no replica at all.
  EXPECT_DOUBLE_EQ(max_load_lower_bound({40, 1, 1, 1}, 4, 1, 4), 40.0);
  // One spare slot (5 ranks x 1 slot, 4 experts): expert 0 gets 2 copies at most -> 20.
  EXPECT_DOUBLE_EQ(max_load_lower_bound({40, 1, 1, 1}, 5, 1, 4), 20.0);
  EXPECT_DOUBLE_EQ(max_load_lower_bound({40, 1, 1, 1, 1}, 3, 2, 4), 20.0);
}

TEST(PlannerTest, Deterministic) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 100);
  std::vector<std::vector<double>> load(3, std::vector<double>(32));
  for (auto& row : load) {
    for (auto& x : row) x = u(rng);
  }
  PlannerInput in = input(load, 8, 2, 5);
  EXPECT_EQ(plan_to_json(plan_or_die(in)), plan_to_json(plan_or_die(in)));
}

// Invariants on 100 random inputs, both algorithms, with and without groups.
TEST(PlannerTest, RandomInvariants) {
  std::mt19937 rng(12345);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 100; ++trial) {
    const int E = uni(1, 48);
    const int R = uni(1, 12);
    std::vector<int> divisors;
    for (int n = 1; n <= R; ++n) {
      if (R % n == 0) divisors.push_back(n);
    }
    const int N = divisors[static_cast<size_t>(uni(0, static_cast<int>(divisors.size()) - 1))];
    const int min_slots = (E + R - 1) / R;
    const int S = min_slots + uni(0, 3);
    const int cap = uni(1, 5);
    const int layers = uni(1, 3);
    std::vector<std::vector<double>> load(static_cast<size_t>(layers), std::vector<double>(static_cast<size_t>(E)));
    std::lognormal_distribution<double> heavy(0.0, 1.5);
    for (auto& row : load) {
      for (auto& x : row) x = uni(0, 9) == 0 ? 0.0 : std::floor(1000 * heavy(rng));
    }
    int G = 0;
    if (uni(0, 2) == 0) {
      for (int g = N; g <= E; g += N) {
        if (E % g == 0) {
          G = g;
          break;
        }
      }
    }
    for (auto algo : {PlannerAlgorithm::kBalanced, PlannerAlgorithm::kEplb}) {
      SCOPED_TRACE("trial " + std::to_string(trial) + ": E=" + std::to_string(E) + " R=" + std::to_string(R) +
                   " N=" + std::to_string(N) + " S=" + std::to_string(S) + " cap=" + std::to_string(cap) +
                   " G=" + std::to_string(G) + (algo == PlannerAlgorithm::kEplb ? " eplb" : " balanced"));
      PlannerInput in = input(load, R, N, S, cap);
      in.num_groups = G;
      in.algorithm = algo;
      auto p = plan_placement(in);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      ASSERT_TRUE(validate_plan(*p).ok()) << validate_plan(*p).to_string();
      ASSERT_EQ(p->layers.size(), load.size());
      for (size_t l = 0; l < load.size(); ++l) {
        const LayerPlan& L = p->layers[l];
        EXPECT_EQ(L.layer, static_cast<int>(l));
        std::vector<int> count(static_cast<size_t>(E), 0);
        for (const auto& slots : L.rank_slots) {
          EXPECT_LE(static_cast<int>(slots.size()), S);  // slot counts respected
          std::set<int> distinct(slots.begin(), slots.end());
          EXPECT_EQ(distinct.size(), slots.size());  // replicas on distinct ranks
          for (int e : slots) ++count[static_cast<size_t>(e)];
        }
        for (int e = 0; e < E; ++e) {
          EXPECT_GE(count[static_cast<size_t>(e)], 1) << "expert " << e;  // every expert present
          EXPECT_LE(count[static_cast<size_t>(e)], std::min(cap, R)) << "expert " << e;  // cap respected
          EXPECT_EQ(L.replica_count[static_cast<size_t>(e)], count[static_cast<size_t>(e)]);
        }
        if (G > 0) {  // every replica on its group's node
          const int per_group = E / G, rpn = R / N;
          std::vector<int> node_of_group(static_cast<size_t>(G), -1);
          for (int r = 0; r < R; ++r) {
            for (int e : L.rank_slots[static_cast<size_t>(r)]) {
              int& n = node_of_group[static_cast<size_t>(e / per_group)];
              if (n < 0) n = r / rpn;
              EXPECT_EQ(n, r / rpn) << "group " << e / per_group << " on two nodes";
            }
          }
        }
        // Loads accounted: the ranks' loads add up to the layer's load.
        const auto ranks = rank_loads(L, load[l], R);
        const double total = std::accumulate(load[l].begin(), load[l].end(), 0.0);
        const double sum = std::accumulate(ranks.begin(), ranks.end(), 0.0);
        EXPECT_NEAR(sum, total, 1e-9 * std::max(1.0, total));
        // No plan beats the lower bound.
        const double mx = *std::max_element(ranks.begin(), ranks.end());
        EXPECT_GE(mx, max_load_lower_bound(load[l], R, S, cap) * (1 - 1e-9));
      }
      if (algo == PlannerAlgorithm::kBalanced && G == 0) {
        // Without groups the balanced planner starts from the baseline's packing and only
        // improves its max (then trades at most max_load_tolerance for crossing).
        PlannerInput base = in;
        base.algorithm = PlannerAlgorithm::kEplb;
        auto b = plan_placement(base);
        ASSERT_TRUE(b.ok());
        for (size_t l = 0; l < load.size(); ++l) {
          EXPECT_LE(max_rank_load(*p, load[l], static_cast<int>(l)),
                    max_rank_load(*b, load[l], static_cast<int>(l)) * (1 + in.max_load_tolerance) + 1e-9);
        }
      }
    }
  }
}

TEST(PlannerTest, LayerIdsKept) {
  PlannerInput in = input({{1, 2}, {3, 4}}, 2, 1, 1);
  in.layer_ids = {3, 7};
  PlacementPlan p = plan_or_die(in);
  EXPECT_EQ(p.layers[0].layer, 3);
  EXPECT_EQ(p.layers[1].layer, 7);
}

TEST(PlannerTest, ZeroLoadLayerStillPlacesEveryExpert) {
  PlacementPlan p = plan_or_die(input({{0, 0, 0, 0, 0}}, 2, 1, 4));
  EXPECT_TRUE(validate_plan(p).ok());
  EXPECT_EQ(p.layers[0].replica_count, (std::vector<int>{1, 1, 1, 1, 1}));
}

void expect_invalid(const PlannerInput& in, std::initializer_list<std::string> needles) {
  auto p = plan_placement(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  for (const auto& n : needles) EXPECT_CONTAINS(p.status().message(), n);
}

TEST(PlannerTest, BadInput) {
  const std::vector<std::vector<double>> load = {{1, 2, 3, 4, 5, 6, 7, 8}};
  expect_invalid(input(load, 2, 1, 3), {"num_ranks 2 x slots_per_rank 3 = 6 slots", "8 experts", "slots_per_rank >= 4"});
  expect_invalid(input(load, 6, 4, 2), {"num_ranks 6 is not divisible by num_nodes 4"});
  expect_invalid(input(load, 2, 1, 4, 0), {"replica_cap must be >= 1 (got 0)"});
  expect_invalid(input(load, 0, 1, 4), {"num_ranks must be >= 1"});
  expect_invalid(input(load, 2, 1, 0), {"slots_per_rank must be >= 1"});
  expect_invalid(input({}, 2, 1, 4), {"no layers"});
  expect_invalid(input({{1, 2, 3, 4}, {1, 2, 3}}, 2, 1, 4), {"load[1] has 3 experts, expected 4"});
  expect_invalid(input({{1, 2, -1, 4}}, 2, 1, 4), {"load[0][2] is -1", ">= 0"});
  expect_invalid(input({{1, std::nan(""), 1, 4}}, 2, 1, 4), {"load[0][1] is nan", "finite"});
  expect_invalid(input({{1, std::numeric_limits<double>::infinity(), 1, 4}}, 2, 1, 4), {"load[0][1] is inf"});
  PlannerInput g = input(load, 4, 2, 4);
  g.num_groups = 3;
  expect_invalid(g, {"num_groups 3 does not divide the 8 experts"});
  g.num_groups = 1;
  expect_invalid(g, {"num_groups 1 is not a multiple of num_nodes 2"});
  PlannerInput ids = input({{1, 2}, {3, 4}}, 2, 1, 1);
  ids.layer_ids = {3, 3};
  expect_invalid(ids, {"layer 3 appears twice"});
  ids.layer_ids = {3};
  expect_invalid(ids, {"layer_ids has 1 entries but load has 2 layers"});
}

// ---------------------------------------------------------------------------------------
// Load files.

TEST(LoadFileTest, PlainFormat) {
  auto m = parse_load_json(R"({"load": [[1, 2.5, 0], [0, 0, 0]]})", "x.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->num_experts(), 3);
  EXPECT_EQ(m->layer_ids, (std::vector<int>{0, 1}));  // zero rows kept in this format
  EXPECT_DOUBLE_EQ(m->load[0][1], 2.5);
  auto ids = parse_load_json(R"({"load": [[1], [2]], "layer_ids": [4, 9]})", "x.json");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->layer_ids, (std::vector<int>{4, 9}));
}

TEST(LoadFileTest, SglangFormatSkipsDenseLayers) {
  auto m = parse_load_json(R"({"logical_count": [[0, 0, 0], [0.0, 0.0, 0.0], [5.0, 1.0, 0.0], [1, 1, 1]]})", "s.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->layer_ids, (std::vector<int>{2, 3}));
  EXPECT_EQ(m->skipped_zero_layers, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(m->load[0][0], 5.0);
}

TEST(LoadFileTest, StatsFormat) {
  auto m = parse_load_json(
      R"({"layers": [{"layer": 1, "tokens_per_expert": [3, 4], "ema": [1, 1]}, {"layer": 3, "tokens_per_expert": [5, 6]}],
          "num_experts": 2})",
      "stats.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->layer_ids, (std::vector<int>{1, 3}));
  EXPECT_DOUBLE_EQ(m->load[1][1], 6.0);
}

void expect_bad_load(const std::string& text, std::initializer_list<std::string> needles) {
  auto m = parse_load_json(text, "bad.json");
  ASSERT_FALSE(m.ok()) << text;
  EXPECT_CONTAINS(m.status().message(), "bad.json");
  for (const auto& n : needles) EXPECT_CONTAINS(m.status().message(), n);
}

TEST(LoadFileTest, BadFiles) {
  expect_bad_load("{", {"not valid JSON"});
  expect_bad_load(R"({"loads": []})", {"no 'load', 'logical_count' or 'layers' field"});
  expect_bad_load(R"({"load": [[1, 2, 3], [1, 2]]})", {"load[1] has 2 experts, expected 3 (as load[0])"});
  expect_bad_load(R"({"load": [[1, -2, 3]]})", {"load[0][1] is -2", ">= 0"});
  expect_bad_load(R"({"load": [[1, "NaN", 3]]})", {"load[0][1] is \"NaN\", not a number"});
  expect_bad_load(R"({"load": [[1, null, 3]]})", {"load[0][1] is null, not a number"});
  expect_bad_load(R"({"load": []})", {"'load' must be a non-empty list"});
  expect_bad_load(R"({"load": [[1]], "layer_ids": [1, 2]})", {"layer_ids"});
  expect_bad_load(R"({"load": [[1], [2]], "layer_ids": [1, 1]})", {"layer 1 appears twice"});
  expect_bad_load(R"({"logical_count": [[1, 2], [1, 2, 3]]})", {"logical_count[1] has 3 entries but logical_count[0] has 2", "expected 2"});
  expect_bad_load(R"({"logical_count": [[0, 0], [0, 0]]})", {"all zeros"});
  expect_bad_load(R"({"layers": [{"tokens_per_expert": [1, 2]}, {"tokens_per_expert": [1]}]})",
                  {"layers[1].tokens_per_expert has 1 experts, expected 2"});
  expect_bad_load(R"({"layers": [{"layer": 0}]})", {"layers[0]", "'tokens_per_expert' is missing"});
}

}  // namespace
}  // namespace moe
