// The prefix-reuse figures on hand-computed usage values: cached / prompt token sums and
// hit rates over all requests and over the later ones, per-turn TTFT, the report and the
// result JSON (keys, nulls, the note when the server reports no cached_tokens).
#include <gtest/gtest.h>

#include <vector>

#include "contains_util.h"
#include "moe/serve_bench/reuse_metrics.h"

namespace sb = moe::serve_bench;

namespace {

sb::RequestOutput ok(int prompt_tokens, int cached, double ttft_s) {
  sb::RequestOutput o;
  o.success = true;
  o.prompt_len = prompt_tokens;
  o.cached_tokens = cached;
  o.ttft_s = ttft_s;
  o.usage_reported = true;
  o.output_tokens = 4;
  return o;
}

}  // namespace

TEST(ServeBenchReuseMetrics, HitRatesOnHandComputedUsage) {
  // Two conversations of three turns; one later turn failed, one response lacks cached_tokens.
  std::vector<sb::RequestOutput> outs = {
      ok(40, 0, 0.100),    // c0 t1
      ok(90, 48, 0.020),   // c0 t2
      ok(150, 96, 0.030),  // c0 t3
      ok(50, 16, 0.200),   // c1 t1 (a cached BOS block, say)
      ok(100, -1, 0.040),  // c1 t2: no cached_tokens in its usage -> 0
      sb::RequestOutput{}, // c1 t3: failed -> not counted
  };
  outs[5].prompt_len = 1000;
  outs[5].cached_tokens = 1000;
  const std::vector<bool> later = {false, true, true, false, true, true};
  sb::PrefixReuse r = sb::prefix_reuse(outs, later);
  EXPECT_EQ(r.responses, 5);
  EXPECT_EQ(r.responses_later, 3);
  EXPECT_EQ(r.cached_reported, 4);
  EXPECT_EQ(r.cached_tokens, 0 + 48 + 96 + 16 + 0);
  EXPECT_EQ(r.prompt_tokens, 40 + 90 + 150 + 50 + 100);
  EXPECT_EQ(r.cached_tokens_later, 48 + 96 + 0);
  EXPECT_EQ(r.prompt_tokens_later, 90 + 150 + 100);
  EXPECT_DOUBLE_EQ(r.hit_rate(), 160.0 / 430.0);
  EXPECT_DOUBLE_EQ(r.hit_rate_later(), 144.0 / 340.0);

  sb::TurnTtft t = sb::turn_ttft(outs, later);
  EXPECT_EQ(t.turn1.count, 2);
  EXPECT_EQ(t.later.count, 3);
  EXPECT_NEAR(t.turn1.median_ms, 150.0, 1e-9);  // (100 + 200) / 2
  EXPECT_NEAR(t.later.median_ms, 30.0, 1e-9);
  ASSERT_EQ(t.later.percentiles_ms.size(), 1u);
  EXPECT_NEAR(t.later.percentiles_ms[0].second, 30.0 + (40.0 - 30.0) * 0.98, 1e-9);  // np.percentile: rank 1.98
  EXPECT_NEAR(t.turn1.percentiles_ms[0].second, 100.0 + 100.0 * 0.99, 1e-9);

  sb::ReuseReport rep;
  rep.workload = sb::Workload::kMultiTurn;
  rep.num_conversations = 2;
  rep.turns = 3;
  rep.conversations_ended_by_failure = 1;
  rep.reuse = r;
  rep.ttft = t;
  const std::string text = sb::format_reuse_report(rep);
  EXPECT_CONTAINS(text, "Workload:                                multi-turn");
  EXPECT_CONTAINS(text, "Ended by a failed request:               1 ");
  EXPECT_CONTAINS(text, "Successful turn-1 / later requests:      2 / 3");
  EXPECT_CONTAINS(text, "Median TTFT turn 1 (ms):                 150.00");
  EXPECT_CONTAINS(text, "Median TTFT turns 2+ (ms):               30.00");
  EXPECT_CONTAINS(text, "Cached / prompt tokens, turns 2+:        144 / 340");
  EXPECT_CONTAINS(text, "Prefix hit rate, turns 2+ (%):           42.35");
  EXPECT_CONTAINS(text, "Prefix hit rate, all (%):                37.21");
  EXPECT_CONTAINS(text, "cached_tokens reported by 4 of 5 responses");

  nlohmann::json j = sb::reuse_json(rep);
  EXPECT_EQ(j["workload"], "multi-turn");
  EXPECT_EQ(j["turns"], 3);
  EXPECT_EQ(j["num_conversations"], 2);
  EXPECT_EQ(j["cached_tokens"], 160);
  EXPECT_EQ(j["prompt_tokens"], 430);
  EXPECT_EQ(j["cached_tokens_later"], 144);
  EXPECT_EQ(j["prompt_tokens_later"], 340);
  EXPECT_DOUBLE_EQ(j["prefix_hit_rate_later"].get<double>(), 144.0 / 340.0);
  EXPECT_DOUBLE_EQ(j["prefix_hit_rate"].get<double>(), 160.0 / 430.0);
  EXPECT_NEAR(j["ttft_turn1_ms_median"].get<double>(), 150.0, 1e-9);
  EXPECT_NEAR(j["ttft_later_ms_median"].get<double>(), 30.0, 1e-9);
  EXPECT_TRUE(j.contains("ttft_turn1_ms_p99"));
  EXPECT_EQ(j["conversations_ended_by_failure"], 1);
  EXPECT_TRUE(j["shared_prefix_tokens"].is_null());
}

TEST(ServeBenchReuseMetrics, NoCachedTokensReportedReadsZeroAndSaysSo) {
  std::vector<sb::RequestOutput> outs = {ok(300, -1, 0.1), ok(310, -1, 0.1)};
  sb::ReuseReport rep;
  rep.workload = sb::Workload::kSharedPrefix;
  rep.shared_prefix_tokens = 256;
  rep.reuse = sb::prefix_reuse(outs, {false, true});
  EXPECT_EQ(rep.reuse.cached_tokens, 0);
  EXPECT_EQ(rep.reuse.hit_rate(), 0.0);
  const std::string text = sb::format_reuse_report(rep);
  EXPECT_CONTAINS(text, "cached_tokens not reported by the server");
  EXPECT_CONTAINS(text, "Cached / prompt tokens, requests 2+:     0 / 310");
  EXPECT_CONTAINS(text, "Shared prefix tokens:                    256");
  EXPECT_EQ(text.find("TTFT"), std::string::npos);
  nlohmann::json j = sb::reuse_json(rep);
  EXPECT_EQ(j["workload"], "shared-prefix");
  EXPECT_EQ(j["shared_prefix_tokens"], 256);
  EXPECT_EQ(j["cached_tokens_reported"], 0);
  EXPECT_TRUE(j["turns"].is_null());
  EXPECT_TRUE(j["ttft_turn1_ms_median"].is_null());
}

TEST(ServeBenchReuseMetrics, SingleWorkloadJsonHasTheTotalsOnly) {
  sb::ReuseReport rep;
  rep.reuse = sb::prefix_reuse({ok(10, 5, 0.1)}, {});
  nlohmann::json j = sb::reuse_json(rep);
  EXPECT_EQ(j["workload"], "single");
  EXPECT_EQ(j["cached_tokens"], 5);
  EXPECT_DOUBLE_EQ(j["prefix_hit_rate"].get<double>(), 0.5);
  EXPECT_FALSE(j.contains("turns"));
  EXPECT_FALSE(j.contains("prefix_hit_rate_later"));
  EXPECT_EQ(sb::prefix_reuse({}, {}).hit_rate(), 0.0);  // no prompt tokens: 0, not NaN
}
