// ExpertLoadStats: totals, EMA (hand-computed), imbalance, merge, clear, the JSON
// format (exact keys, round trip), SGLang's logical_count format, and every parse error
// naming the source and the field.
#include "moe/stats/expert_load_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "contains_util.h"
#include "safetensors_util.h"

namespace moe {
namespace {

using nlohmann::json;

ExpertLoadStats make(std::vector<int> layers, int experts, double decay = 0.9) {
  auto s = ExpertLoadStats::create(std::move(layers), experts, decay);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

void step(ExpertLoadStats& s, int layer, std::vector<int64_t> counts, int64_t dropped = 0, int64_t rerouted = 0) {
  ASSERT_EQ(counts.size(), static_cast<size_t>(s.num_experts()));
  s.record_step(layer, counts.data(), dropped, rerouted);
}

TEST(ExpertLoadStatsTest, CreateRejectsBadArguments) {
  EXPECT_CONTAINS(ExpertLoadStats::create({}, 4).status().message(), "empty");
  EXPECT_CONTAINS(ExpertLoadStats::create({1}, 0).status().message(), "num_experts");
  EXPECT_CONTAINS(ExpertLoadStats::create({1}, 4, 1.0).status().message(), "ema_decay");
  EXPECT_CONTAINS(ExpertLoadStats::create({1}, 4, -0.1).status().message(), "ema_decay");
  EXPECT_CONTAINS(ExpertLoadStats::create({1}, 4, std::nan("")).status().message(), "ema_decay");
  EXPECT_CONTAINS(ExpertLoadStats::create({1, 3, 1}, 4).status().message(), "layer id 1 is listed twice");
  EXPECT_CONTAINS(ExpertLoadStats::create({-2}, 4).status().message(), "-2");
  EXPECT_EQ(ExpertLoadStats::create({}, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ExpertLoadStats::create({0}, 1, 0.0).ok());
}

TEST(ExpertLoadStatsTest, LayerIdsAreSortedAndDenseLayersAbsent) {
  ExpertLoadStats s = make({7, 3, 5}, 2);
  EXPECT_EQ(s.layer_ids(), (std::vector<int>{3, 5, 7}));
  EXPECT_EQ(s.num_layers(), 3);
  EXPECT_EQ(s.num_experts(), 2);
  EXPECT_DOUBLE_EQ(s.ema_decay(), 0.9);
  EXPECT_TRUE(s.has_layer(5));
  EXPECT_FALSE(s.has_layer(4));
  EXPECT_TRUE(s.has_ema());
  EXPECT_EQ(s.steps(3), 0);
  EXPECT_EQ(s.tokens_per_expert(3), (std::vector<int64_t>{0, 0}));
}

TEST(ExpertLoadStatsTest, TotalsAndExactEma) {
  // decay 0.5 keeps every value exact in binary.
  ExpertLoadStats s = make({2, 4}, 2, 0.5);
  step(s, 2, {4, 0}, 1, 2);  // first step: ema = counts
  EXPECT_EQ(s.ema(2), (std::vector<double>{4.0, 0.0}));
  step(s, 2, {0, 8}, 3, 0);  // 0.5*4 + 0.5*0 = 2, 0.5*0 + 0.5*8 = 4
  EXPECT_EQ(s.ema(2), (std::vector<double>{2.0, 4.0}));
  step(s, 2, {2, 2});  // 0.5*2 + 0.5*2 = 2, 0.5*4 + 0.5*2 = 3
  EXPECT_EQ(s.ema(2), (std::vector<double>{2.0, 3.0}));
  EXPECT_EQ(s.tokens_per_expert(2), (std::vector<int64_t>{6, 10}));
  EXPECT_EQ(s.total_tokens(2), 16);
  EXPECT_EQ(s.dropped(2), 4);
  EXPECT_EQ(s.rerouted(2), 2);
  EXPECT_EQ(s.steps(2), 3);
  // The other layer is untouched.
  EXPECT_EQ(s.steps(4), 0);
  EXPECT_EQ(s.total_tokens(4), 0);
  EXPECT_EQ(s.ema(4), (std::vector<double>{0.0, 0.0}));
}

TEST(ExpertLoadStatsTest, EmaWithDefaultDecay) {
  ExpertLoadStats s = make({0}, 3);
  step(s, 0, {10, 0, 5});
  step(s, 0, {20, 10, 5});
  // 0.9*10 + 0.1*20 = 11, 0.9*0 + 0.1*10 = 1, 0.9*5 + 0.1*5 = 5
  EXPECT_DOUBLE_EQ(s.ema(0)[0], 11.0);
  EXPECT_DOUBLE_EQ(s.ema(0)[1], 1.0);
  EXPECT_DOUBLE_EQ(s.ema(0)[2], 5.0);
  step(s, 0, {0, 0, 0});  // 9.9, 0.9, 4.5
  EXPECT_DOUBLE_EQ(s.ema(0)[0], 9.9);
  EXPECT_DOUBLE_EQ(s.ema(0)[1], 0.9);
  EXPECT_DOUBLE_EQ(s.ema(0)[2], 4.5);
}

TEST(ExpertLoadStatsTest, DecayZeroKeepsTheLastStep) {
  ExpertLoadStats s = make({0}, 2, 0.0);
  step(s, 0, {1, 2});
  step(s, 0, {7, 3});
  EXPECT_EQ(s.ema(0), (std::vector<double>{7.0, 3.0}));
}

TEST(ExpertLoadStatsTest, ImbalanceAndHottestExpert) {
  ExpertLoadStats s = make({0, 1, 2}, 4);
  EXPECT_DOUBLE_EQ(s.imbalance(0), 1.0);  // no tokens yet
  EXPECT_EQ(s.hottest_expert(0), 0);
  step(s, 0, {0, 0, 0, 12});  // all on one expert: max/mean = 12/3 = 4 = num_experts
  EXPECT_DOUBLE_EQ(s.imbalance(0), 4.0);
  EXPECT_EQ(s.hottest_expert(0), 3);
  step(s, 1, {5, 5, 5, 5});
  EXPECT_DOUBLE_EQ(s.imbalance(1), 1.0);
  step(s, 2, {1, 6, 6, 3});  // mean 4, max 6 -> 1.5; tie -> lowest id
  EXPECT_DOUBLE_EQ(s.imbalance(2), 1.5);
  EXPECT_EQ(s.hottest_expert(2), 1);
  // Summed over steps, not per step: {1,6,6,3} + {7,2,2,5} = {8,8,8,8}.
  step(s, 2, {7, 2, 2, 5});
  EXPECT_DOUBLE_EQ(s.imbalance(2), 1.0);
}

TEST(ExpertLoadStatsTest, MergeSumsCountsAndEmaAndTakesMaxSteps) {
  ExpertLoadStats a = make({1, 3}, 2, 0.5);
  ExpertLoadStats b = make({1, 3}, 2, 0.5);
  step(a, 1, {1, 2}, 1, 0);
  step(a, 1, {3, 4});
  step(b, 1, {10, 20}, 2, 5);
  step(b, 1, {30, 40});
  step(b, 3, {0, 9});
  ExpertLoadStats sum_of_counts = make({1, 3}, 2, 0.5);  // one rank seeing both ranks' tokens
  step(sum_of_counts, 1, {11, 22});
  step(sum_of_counts, 1, {33, 44});
  ASSERT_TRUE(a.merge(b).ok());
  EXPECT_EQ(a.tokens_per_expert(1), (std::vector<int64_t>{44, 66}));
  EXPECT_EQ(a.tokens_per_expert(3), (std::vector<int64_t>{0, 9}));
  EXPECT_EQ(a.dropped(1), 3);
  EXPECT_EQ(a.rerouted(1), 5);
  EXPECT_EQ(a.steps(1), 2);
  EXPECT_EQ(a.steps(3), 1);
  // EMA is linear: the sum of the ranks' EMAs is the EMA of the summed counts.
  EXPECT_EQ(a.ema(1), sum_of_counts.ema(1));
  EXPECT_EQ(a.ema(3), (std::vector<double>{0.0, 9.0}));
}

TEST(ExpertLoadStatsTest, MergeRejectsDifferentShapesAndLeavesTheTargetUnchanged) {
  ExpertLoadStats a = make({1, 3}, 2);
  step(a, 1, {1, 2});
  const std::string before = a.to_json_string();
  EXPECT_CONTAINS(a.merge(make({1, 4}, 2)).message(), "layer ids");
  EXPECT_CONTAINS(a.merge(make({1, 3}, 3)).message(), "num_experts");
  EXPECT_CONTAINS(a.merge(make({1, 3}, 2, 0.5)).message(), "ema_decay");
  EXPECT_EQ(a.to_json_string(), before);
  // Overflow is an error too, not undefined behaviour.
  auto big = ExpertLoadStats::parse_json(R"({"layers": [{"layer": 1, "tokens_per_expert": [9223372036854775807, 0]},
                                                       {"layer": 3, "tokens_per_expert": [0, 0]}]})",
                                         "big.json");
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  Status st = a.merge(big.value());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(a.to_json_string(), before);
}

TEST(ExpertLoadStatsTest, ClearResetsCountsAndReinitialisesEma) {
  ExpertLoadStats s = make({0}, 2, 0.5);
  step(s, 0, {4, 4}, 1, 1);
  s.clear();
  EXPECT_EQ(s.tokens_per_expert(0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.steps(0), 0);
  EXPECT_EQ(s.dropped(0), 0);
  EXPECT_EQ(s.rerouted(0), 0);
  step(s, 0, {2, 6});
  EXPECT_EQ(s.ema(0), (std::vector<double>{2.0, 6.0}));
}

TEST(ExpertLoadStatsDeathTest, UnknownLayerIsABug) {
  ExpertLoadStats s = make({0, 2}, 2);
  const int64_t counts[2] = {1, 1};
  EXPECT_DEATH(s.record_step(1, counts, 0, 0), "MOE_CHECK");
  EXPECT_DEATH((void)s.imbalance(5), "MOE_CHECK");
}

TEST(ExpertLoadStatsTest, JsonHasExactlyTheDocumentedShape) {
  ExpertLoadStats s = make({5, 2}, 3, 0.5);
  step(s, 2, {1, 2, 3}, 4, 5);
  step(s, 5, {0, 0, 6});
  json j = json::parse(s.to_json_string());
  std::set<std::string> keys;
  for (auto& [k, v] : j.items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"layers", "num_experts", "ema_decay"}));
  EXPECT_EQ(j["num_experts"], 3);
  EXPECT_EQ(j["ema_decay"], 0.5);
  ASSERT_EQ(j["layers"].size(), 2u);
  const json& l0 = j["layers"][0];
  std::set<std::string> lkeys;
  for (auto& [k, v] : l0.items()) lkeys.insert(k);
  EXPECT_EQ(lkeys, (std::set<std::string>{"layer", "tokens_per_expert", "ema", "dropped", "rerouted", "steps",
                                          "degraded_tokens", "degraded_per_expert", "adaptive_tokens",
                                          "adaptive_dropped", "requeued", "imbalance"}));
  EXPECT_EQ(l0["layer"], 2);
  EXPECT_EQ(l0["tokens_per_expert"], json::array({1, 2, 3}));
  EXPECT_EQ(l0["ema"], json::array({1.0, 2.0, 3.0}));
  EXPECT_EQ(l0["dropped"], 4);
  EXPECT_EQ(l0["rerouted"], 5);
  EXPECT_EQ(l0["steps"], 1);
  EXPECT_EQ(l0["degraded_tokens"], 0);
  EXPECT_EQ(l0["degraded_per_expert"], json::array({0, 0, 0}));
  EXPECT_DOUBLE_EQ(l0["imbalance"].get<double>(), 1.5);
  EXPECT_EQ(j["layers"][1]["layer"], 5);
  EXPECT_DOUBLE_EQ(j["layers"][1]["imbalance"].get<double>(), 3.0);
}

TEST(ExpertLoadStatsTest, JsonRoundTrip) {
  ExpertLoadStats s = make({1, 3, 8}, 4, 0.9);
  step(s, 1, {1, 2, 3, 4}, 1, 2);
  step(s, 1, {7, 0, 0, 1});
  step(s, 8, {5, 5, 5, 6}, 0, 9);
  for (int indent : {-1, 2}) {
    auto back = ExpertLoadStats::parse_json(s.to_json_string(indent), "rt.json");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->layer_ids(), s.layer_ids());
    EXPECT_EQ(back->num_experts(), 4);
    EXPECT_EQ(back->ema_decay(), 0.9);
    EXPECT_TRUE(back->has_ema());
    for (int id : s.layer_ids()) {
      EXPECT_EQ(back->tokens_per_expert(id), s.tokens_per_expert(id));
      EXPECT_EQ(back->ema(id), s.ema(id));  // doubles are written with round-trip precision
      EXPECT_EQ(back->dropped(id), s.dropped(id));
      EXPECT_EQ(back->rerouted(id), s.rerouted(id));
      EXPECT_EQ(back->steps(id), s.steps(id));
    }
    EXPECT_EQ(back->to_json_string(), s.to_json_string());
  }
}

// Degraded mode (an expert lost with its rank): per-layer totals, per-expert totals,
// merge, clear, JSON round trip, older files without the fields, and bad fields.
TEST(ExpertLoadStatsTest, DegradedTokens) {
  ExpertLoadStats s = make({1, 4}, 3);
  const std::vector<int64_t> counts{2, 0, 4}, wanted{0, 3, 0}, wanted2{1, 2, 0};
  s.record_step(1, counts.data(), 0, 0, 3, wanted.data());
  s.record_step(1, counts.data(), 0, 0, 2, wanted2.data());
  s.record_step(4, counts.data(), 1, 0);  // not degraded: the defaults
  EXPECT_EQ(s.degraded_tokens(1), 5);
  EXPECT_EQ(s.degraded_per_expert(1), (std::vector<int64_t>{1, 5, 0}));
  EXPECT_EQ(s.degraded_tokens(4), 0);
  EXPECT_EQ(s.degraded_per_expert(4), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(s.tokens_per_expert(1), (std::vector<int64_t>{4, 0, 8}));  // unchanged by degraded counts

  ExpertLoadStats other = make({1, 4}, 3);
  other.record_step(4, counts.data(), 0, 0, 7, wanted.data());
  ASSERT_TRUE(s.merge(other).ok());
  EXPECT_EQ(s.degraded_tokens(1), 5);
  EXPECT_EQ(s.degraded_tokens(4), 7);
  EXPECT_EQ(s.degraded_per_expert(4), (std::vector<int64_t>{0, 3, 0}));

  const json j = json::parse(s.to_json_string());
  EXPECT_EQ(j["layers"][0]["degraded_tokens"], 5);
  EXPECT_EQ(j["layers"][0]["degraded_per_expert"], json::array({1, 5, 0}));
  auto back = ExpertLoadStats::parse_json(s.to_json_string(2), "d.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->degraded_tokens(4), 7);
  EXPECT_EQ(back->degraded_per_expert(1), (std::vector<int64_t>{1, 5, 0}));
  EXPECT_EQ(back->to_json_string(), s.to_json_string());

  // A file from before degraded mode reads as zeros.
  auto old = ExpertLoadStats::parse_json(R"({"layers": [{"tokens_per_expert": [1, 2]}]})", "old.json");
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ(old->degraded_tokens(0), 0);
  EXPECT_EQ(old->degraded_per_expert(0), (std::vector<int64_t>{0, 0}));
  auto sglang = ExpertLoadStats::parse_json(R"({"logical_count": [[1, 2]]})", "sg.json");
  ASSERT_TRUE(sglang.ok()) << sglang.status().to_string();
  EXPECT_EQ(sglang->degraded_per_expert(0), (std::vector<int64_t>{0, 0}));

  auto short_row = ExpertLoadStats::parse_json(
      R"({"layers": [{"tokens_per_expert": [1, 2], "degraded_per_expert": [1]}]})", "bad.json");
  ASSERT_FALSE(short_row.ok());
  EXPECT_CONTAINS(short_row.status().message(), "bad.json: layers[0].degraded_per_expert has 1 entries");
  auto negative = ExpertLoadStats::parse_json(
      R"({"layers": [{"tokens_per_expert": [1, 2], "degraded_per_expert": [1, -1]}]})", "bad.json");
  ASSERT_FALSE(negative.ok());
  EXPECT_CONTAINS(negative.status().message(), "layers[0].degraded_per_expert[1]");
  auto bad_total = ExpertLoadStats::parse_json(R"({"layers": [{"tokens_per_expert": [1, 2], "degraded_tokens": -3}]})",
                                               "bad.json");
  ASSERT_FALSE(bad_total.ok());
  EXPECT_CONTAINS(bad_total.status().message(), "degraded_tokens");

  s.clear();
  EXPECT_EQ(s.degraded_tokens(1), 0);
  EXPECT_EQ(s.degraded_per_expert(1), (std::vector<int64_t>{0, 0, 0}));
}

TEST(ExpertLoadStatsTest, FileRoundTripAndMissingFile) {
  moe::testing::ScopedTempDir dir("stats_rt");
  ExpertLoadStats s = make({0}, 2);
  step(s, 0, {3, 1});
  ASSERT_TRUE(s.write_json_file(dir.file("s.json")).ok());
  auto back = ExpertLoadStats::load_json_file(dir.file("s.json"));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->to_json_string(), s.to_json_string());

  auto missing = ExpertLoadStats::load_json_file(dir.file("nope.json"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), dir.file("nope.json"));
  Status w = s.write_json_file(dir.file("no/such/dir/s.json"));
  EXPECT_FALSE(w.ok());
  EXPECT_CONTAINS(w.message(), dir.file("no/such/dir/s.json"));
}

TEST(ExpertLoadStatsTest, ParsesAMinimalHandMadeFile) {
  // Only tokens_per_expert is required; layer ids default to positions; integral floats pass.
  auto s = ExpertLoadStats::parse_json(R"({"layers": [{"tokens_per_expert": [1, 2.0]},
                                                     {"tokens_per_expert": [0, 4], "dropped": 3}]})",
                                       "hand.json");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->layer_ids(), (std::vector<int>{0, 1}));
  EXPECT_EQ(s->tokens_per_expert(0), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s->dropped(1), 3);
  EXPECT_EQ(s->steps(1), 0);
  EXPECT_FALSE(s->has_ema());
  EXPECT_EQ(s->ema(0), (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(s->ema_decay(), 0.9);
  EXPECT_DOUBLE_EQ(s->imbalance(1), 2.0);
}

TEST(ExpertLoadStatsTest, ParsedLayersAreSortedById) {
  auto s = ExpertLoadStats::parse_json(R"({"layers": [{"layer": 9, "tokens_per_expert": [9, 0]},
                                                     {"layer": 4, "tokens_per_expert": [4, 1]}]})",
                                       "unsorted.json");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->layer_ids(), (std::vector<int>{4, 9}));
  EXPECT_EQ(s->tokens_per_expert(9), (std::vector<int64_t>{9, 0}));
  EXPECT_EQ(s->tokens_per_expert(4), (std::vector<int64_t>{4, 1}));
}

TEST(ExpertLoadStatsTest, ParsesSglangLogicalCountSkippingZeroLayers) {
  std::vector<int> skipped = {42};  // cleared by the parser
  auto s = ExpertLoadStats::parse_json(R"({"logical_count": [[0.0, 0.0, 0.0], [3.0, 0.0, 1.0], [0, 0, 0], [2, 2, 2]]})",
                                       "sglang.json", &skipped);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(skipped, (std::vector<int>{0, 2}));
  EXPECT_EQ(s->layer_ids(), (std::vector<int>{1, 3}));
  EXPECT_EQ(s->num_experts(), 3);
  EXPECT_EQ(s->tokens_per_expert(1), (std::vector<int64_t>{3, 0, 1}));
  EXPECT_EQ(s->steps(1), 0);
  EXPECT_FALSE(s->has_ema());
  EXPECT_EQ(s->ema(3), (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_DOUBLE_EQ(s->imbalance(1), 2.25);
}

// The one SGLang parser, as the placement load files and `moe bench capacity` use it.
TEST(SglangLogicalCountTest, ParsesRowsAndListsZeroLayers) {
  const auto j = nlohmann::json::parse(R"({"logical_count": [[0, 0], [807392.0, 1], [0.0, 0], [2, 3]]})");
  auto sg = parse_sglang_logical_count(j, "sg.json");
  ASSERT_TRUE(sg.ok()) << sg.status().to_string();
  EXPECT_EQ(sg->layer_ids, (std::vector<int>{1, 3}));
  EXPECT_EQ(sg->zero_layers, (std::vector<int>{0, 2}));
  EXPECT_EQ(sg->num_experts(), 2);
  EXPECT_EQ(sg->counts[0], (std::vector<int64_t>{807392, 1}));
  EXPECT_EQ(sg->counts[1], (std::vector<int64_t>{2, 3}));
}

TEST(SglangLogicalCountTest, ErrorsNameSourceAndField) {
  auto bad = [](const char* text) {
    auto sg = parse_sglang_logical_count(nlohmann::json::parse(text), "sg.json");
    EXPECT_FALSE(sg.ok()) << text;
    return sg.ok() ? std::string() : sg.status().message();
  };
  EXPECT_CONTAINS(bad(R"({"logical_count": 3})"), "sg.json: field 'logical_count' must be an array");
  EXPECT_CONTAINS(bad(R"({"logical_count": []})"), "is empty");
  EXPECT_CONTAINS(bad(R"({"logical_count": [[1, 2], [1]]})"),
                  "sg.json: logical_count[1] has 1 entries but logical_count[0] has 2");
  EXPECT_CONTAINS(bad(R"({"logical_count": [[1, 2], [1]]})"), "expected 2");
  EXPECT_CONTAINS(bad(R"({"logical_count": [[1, -2]]})"), "logical_count[0][1] must be a non-negative integer (got -2)");
  EXPECT_CONTAINS(bad(R"({"logical_count": [[1, 2.5]]})"), "logical_count[0][1]");
  EXPECT_CONTAINS(bad(R"({"logical_count": [[0, 0]]})"), "every layer is all zeros");
}

TEST(ExpertLoadStatsTest, DeeplyNestedInputIsAnErrorNotACrash) {
  // Error messages show arrays by size, never dumped (which would recurse this deep).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto s = ExpertLoadStats::parse_json(R"({"layers": [{"tokens_per_expert": )" + deep + "}]}", "deep.json");
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.status().message(), "deep.json: layers[0].tokens_per_expert[0] must be a non-negative integer");
  EXPECT_CONTAINS(s.status().message(), "(got an array of 1)");
  s = ExpertLoadStats::parse_json(R"({"logical_count": )" + deep + "}", "deep2.json");
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.status().message(), "deep2.json: logical_count[0]");
}

// Each malformed input: InvalidArgument whose message names the source and the field.
struct BadCase {
  const char* name;
  const char* text;
  std::vector<std::string> needles;
};

class ExpertLoadStatsParseErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ExpertLoadStatsParseErrorTest, NamesSourceAndField) {
  const BadCase& c = GetParam();
  auto s = ExpertLoadStats::parse_json(c.text, "bad_stats.json");
  ASSERT_FALSE(s.ok()) << c.name;
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(s.status().message(), "bad_stats.json: ");
  for (const std::string& n : c.needles) EXPECT_CONTAINS(s.status().message(), n);
}

INSTANTIATE_TEST_SUITE_P(
    All, ExpertLoadStatsParseErrorTest,
    ::testing::Values(
        BadCase{"NotJson", "{\"layers\": [", {"not valid JSON", "line 1"}},
        BadCase{"Empty", "", {"not valid JSON"}},
        BadCase{"NotAnObject", "[1, 2]", {"not a JSON object", "logical_count"}},
        BadCase{"MissingLayers", R"({"num_experts": 4})", {"required field 'layers' is missing"}},
        BadCase{"LayersNotArray", R"({"layers": 3})", {"field 'layers' must be an array"}},
        BadCase{"EmptyLayers", R"({"layers": []})", {"field 'layers' is empty"}},
        BadCase{"LayerNotObject", R"({"layers": [[1, 2]]})", {"layers[0] must be an object"}},
        BadCase{"MissingTokens", R"({"layers": [{"tokens_per_expert": [1]}, {"ema": [1]}]})",
                {"layers[1]", "'tokens_per_expert' is missing"}},
        BadCase{"TokensNotArray", R"({"layers": [{"tokens_per_expert": "1,2"}]})",
                {"layers[0].tokens_per_expert must be an array"}},
        BadCase{"EmptyRow", R"({"layers": [{"tokens_per_expert": []}]})", {"layers[0].tokens_per_expert is empty"}},
        BadCase{"NonNumeric", R"({"layers": [{"tokens_per_expert": [1, "x", 3]}]})",
                {"layers[0].tokens_per_expert[1] must be a non-negative integer", "\"x\""}},
        BadCase{"Negative", R"({"layers": [{"tokens_per_expert": [1, 2]}, {"tokens_per_expert": [5, -3]}]})",
                {"layers[1].tokens_per_expert[1]", "-3"}},
        BadCase{"Fractional", R"({"layers": [{"tokens_per_expert": [1.5, 2]}]})", {"tokens_per_expert[0]", "1.5"}},
        BadCase{"Boolean", R"({"layers": [{"tokens_per_expert": [true, 2]}]})", {"tokens_per_expert[0]", "true"}},
        BadCase{"Null", R"({"layers": [{"tokens_per_expert": [1, null]}]})", {"tokens_per_expert[1]", "null"}},
        BadCase{"TooLarge", R"({"layers": [{"tokens_per_expert": [1e30]}]})", {"tokens_per_expert[0]"}},
        BadCase{"RowSumOverflows", R"({"layers": [{"tokens_per_expert": [9223372036854775807, 1]}]})",
                {"layers[0].tokens_per_expert", "int64"}},
        BadCase{"Ragged", R"({"layers": [{"tokens_per_expert": [1, 2, 3]}, {"tokens_per_expert": [1, 2]}]})",
                {"layers[1].tokens_per_expert has 2 entries but layers[0].tokens_per_expert has 3"}},
        BadCase{"EmaLength", R"({"layers": [{"tokens_per_expert": [1, 2], "ema": [1]}]})",
                {"layers[0].ema has 1 entries"}},
        BadCase{"EmaNegative", R"({"layers": [{"tokens_per_expert": [1, 2], "ema": [1, -0.5]}]})",
                {"layers[0].ema[1]", "-0.5"}},
        BadCase{"EmaNotArray", R"({"layers": [{"tokens_per_expert": [1, 2], "ema": 1}]})", {"layers[0].ema"}},
        BadCase{"EmaInSomeLayers",
                R"({"layers": [{"tokens_per_expert": [1, 2], "ema": [1, 2]}, {"tokens_per_expert": [1, 2]}]})",
                {"layers[1]", "'ema' is missing"}},
        BadCase{"EmaInLaterLayersOnly",
                R"({"layers": [{"tokens_per_expert": [1, 2]}, {"tokens_per_expert": [1, 2], "ema": [1, 2]}]})",
                {"layers[1]", "'ema' is present"}},
        BadCase{"DuplicateLayer",
                R"({"layers": [{"layer": 3, "tokens_per_expert": [1]}, {"layer": 3, "tokens_per_expert": [2]}]})",
                {"layers[1].layer", "3 appears twice"}},
        BadCase{"NegativeLayer", R"({"layers": [{"layer": -1, "tokens_per_expert": [1]}]})", {"layers[0].layer", "-1"}},
        BadCase{"LayerNotInt", R"({"layers": [{"layer": "a", "tokens_per_expert": [1]}]})", {"layers[0].layer"}},
        BadCase{"NegativeDropped", R"({"layers": [{"tokens_per_expert": [1], "dropped": -2}]})",
                {"layers[0].dropped", "-2"}},
        BadCase{"BadRerouted", R"({"layers": [{"tokens_per_expert": [1], "rerouted": "many"}]})",
                {"layers[0].rerouted"}},
        BadCase{"BadSteps", R"({"layers": [{"tokens_per_expert": [1], "steps": 0.5}]})", {"layers[0].steps"}},
        BadCase{"NumExpertsMismatch", R"({"layers": [{"tokens_per_expert": [1, 2]}], "num_experts": 3})",
                {"'num_experts' is 3", "2 entries"}},
        BadCase{"EmaDecayOutOfRange", R"({"layers": [{"tokens_per_expert": [1]}], "ema_decay": 1.5})",
                {"'ema_decay'", "[0, 1)", "1.5"}},
        BadCase{"SglangNotArray", R"({"logical_count": {"a": 1}})", {"'logical_count' must be an array"}},
        BadCase{"SglangEmpty", R"({"logical_count": []})", {"'logical_count' is empty"}},
        BadCase{"SglangRagged", R"({"logical_count": [[1, 2], [1, 2, 3]]})",
                {"logical_count[1] has 3 entries but logical_count[0] has 2"}},
        BadCase{"SglangNonNumeric", R"({"logical_count": [[1, 2], [1, "2"]]})", {"logical_count[1][1]"}},
        BadCase{"SglangAllZero", R"({"logical_count": [[0, 0], [0, 0]]})", {"every layer is all zeros"}}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

// Adaptive top-k / adaptive_requeue counters: summed per layer, merged,
// cleared, and round-tripped through the JSON form (absent in older files: 0).
TEST(ExpertLoadStatsTest, AdaptiveCounters) {
  auto a = ExpertLoadStats::create({1, 3}, 2).value();
  const int64_t c[2] = {3, 1};
  a.record_step(1, c, 0, 0);
  a.record_adaptive(1, 2, 3, 4);
  a.record_adaptive(1, 1, 1, 0);
  EXPECT_EQ(a.adaptive_tokens(1), 3);
  EXPECT_EQ(a.adaptive_dropped(1), 4);
  EXPECT_EQ(a.requeued(1), 4);
  EXPECT_EQ(a.adaptive_dropped(3), 0);
  EXPECT_EQ(a.steps(1), 1);  // record_adaptive is not a step
  auto b = ExpertLoadStats::create({1, 3}, 2).value();
  b.record_adaptive(3, 5, 6, 7);
  ASSERT_TRUE(a.merge(b).ok());
  EXPECT_EQ(a.requeued(3), 7);
  auto back = ExpertLoadStats::parse_json(a.to_json_string(), "a.json").value();
  EXPECT_EQ(back.adaptive_tokens(1), 3);
  EXPECT_EQ(back.adaptive_dropped(3), 6);
  EXPECT_EQ(back.requeued(1), 4);
  auto old = ExpertLoadStats::parse_json(R"({"layers": [{"tokens_per_expert": [1, 2]}]})", "old.json").value();
  EXPECT_EQ(old.adaptive_dropped(0), 0);
  a.clear();
  EXPECT_EQ(a.adaptive_tokens(1), 0);
  EXPECT_EQ(a.requeued(3), 0);
}

}  // namespace
}  // namespace moe
