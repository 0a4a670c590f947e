// vLLM's serving metrics (calculate_metrics) on hand-computed cases, numpy's
// percentile/std conventions, the SLO/percentile flag parsers, the result table.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "contains_util.h"
#include "moe/serve_bench/serving_metrics.h"

namespace sb = moe::serve_bench;

namespace {

sb::RequestOutput ok(double ttft, double latency, int out_tokens, std::vector<double> itl, int prompt) {
  sb::RequestOutput o;
  o.success = true;
  o.ttft_s = ttft;
  o.latency_s = latency;
  o.output_tokens = out_tokens;
  o.usage_reported = out_tokens >= 0;
  o.itl_s = std::move(itl);
  o.prompt_len = prompt;
  o.text_chunks = static_cast<int>(o.itl_s.size()) + 1;
  return o;
}

sb::RequestOutput failed(const std::string& error) {
  sb::RequestOutput o;
  o.error = error;
  return o;
}

// r0: 10 tokens, TTFT 0.1, E2EL 1.0, nine 0.1 s gaps -> TPOT 0.9/9 = 0.1
// r1: 4 tokens, TTFT 0.2, E2EL 0.8, gaps 0.1 0.2 0.3 -> TPOT 0.6/3 = 0.2
// r2: 1 token, TTFT 0.3, E2EL 0.3 -> no TPOT (0 for goodput)
// r3: failed
std::vector<sb::RequestOutput> sample() {
  return {ok(0.1, 1.0, 10, std::vector<double>(9, 0.1), 20), ok(0.2, 0.8, 4, {0.1, 0.2, 0.3}, 30),
          ok(0.3, 0.3, 1, {}, 5), failed("HTTP 500: boom")};
}

constexpr double kEps = 1e-9;

}  // namespace

TEST(ServeBenchMetrics, PercentileIsNumpyLinear) {
  EXPECT_DOUBLE_EQ(sb::percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(sb::percentile({4, 3, 2, 1}, 25), 1.75);  // unsorted input
  EXPECT_DOUBLE_EQ(sb::percentile({1, 2, 3, 4, 5}, 0), 1);
  EXPECT_DOUBLE_EQ(sb::percentile({1, 2, 3, 4, 5}, 100), 5);
  EXPECT_DOUBLE_EQ(sb::percentile({10, 20}, 99), 19.9);
  EXPECT_DOUBLE_EQ(sb::percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(sb::percentile({}, 50), 0);  // vLLM: np.percentile(x or 0)
  EXPECT_NEAR(sb::percentile({0.1, 0.2, 0.3}, 90), 0.28, kEps);
}

TEST(ServeBenchMetrics, MeanAndPopulationStd) {
  EXPECT_DOUBLE_EQ(sb::mean({1, 2, 3, 4}), 2.5);
  EXPECT_DOUBLE_EQ(sb::stddev({2, 4, 4, 4, 5, 5, 7, 9}), 2.0);  // ddof = 0
  EXPECT_DOUBLE_EQ(sb::stddev({}), 0.0);
  EXPECT_DOUBLE_EQ(sb::mean({}), 0.0);
}

TEST(ServeBenchMetrics, HandComputedCase) {
  sb::BenchmarkMetrics m = sb::calculate_metrics(sample(), 2.0, {50, 90, 99}, {});
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 55);   // failed requests do not count
  EXPECT_EQ(m.total_output, 15);
  EXPECT_DOUBLE_EQ(m.duration_s, 2.0);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 7.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 35.0);
  EXPECT_EQ(m.output_lens, (std::vector<int>{10, 4, 1, 0}));
  EXPECT_EQ(m.first_error, "HTTP 500: boom");
  EXPECT_EQ(m.first_error_index, 3);

  // TTFT {0.1, 0.2, 0.3}
  EXPECT_NEAR(m.ttft.mean_ms, 200, 1e-6);
  EXPECT_NEAR(m.ttft.median_ms, 200, 1e-6);
  EXPECT_NEAR(m.ttft.std_ms, 1000 * std::sqrt(0.02 / 3), 1e-6);
  ASSERT_EQ(m.ttft.percentiles_ms.size(), 3u);
  EXPECT_EQ(m.ttft.percentiles_ms[1].first, 90);
  EXPECT_NEAR(m.ttft.percentiles_ms[1].second, 280, 1e-6);
  EXPECT_NEAR(m.ttft.percentiles_ms[2].second, 298, 1e-6);

  // TPOT {0.1, 0.2}: the 1-token request has none
  EXPECT_EQ(m.tpot.count, 2);
  EXPECT_NEAR(m.tpot.mean_ms, 150, 1e-6);
  EXPECT_NEAR(m.tpot.median_ms, 150, 1e-6);
  EXPECT_NEAR(m.tpot.std_ms, 50, 1e-6);
  EXPECT_NEAR(m.tpot.percentiles_ms[1].second, 190, 1e-6);
  EXPECT_NEAR(m.tpots_s[0], 0.1, kEps);
  EXPECT_NEAR(m.tpots_s[1], 0.2, kEps);
  EXPECT_EQ(m.tpots_s[2], 0.0);

  // ITL pooled: ten 0.1, one 0.2, one 0.3
  EXPECT_EQ(m.itl.count, 12);
  EXPECT_NEAR(m.itl.mean_ms, 125, 1e-6);
  EXPECT_NEAR(m.itl.median_ms, 100, 1e-6);
  EXPECT_NEAR(m.itl.percentiles_ms[1].second, 190, 1e-6);  // rank 9.9
  EXPECT_NEAR(m.itl.percentiles_ms[2].second, 289, 1e-6);  // rank 10.89

  // E2EL {1.0, 0.8, 0.3}
  EXPECT_NEAR(m.e2el.mean_ms, 700, 1e-6);
  EXPECT_NEAR(m.e2el.median_ms, 800, 1e-6);
  EXPECT_NEAR(m.e2el.percentiles_ms[0].second, 800, 1e-6);
}

TEST(ServeBenchMetrics, Goodput) {
  sb::GoodputSlo both;
  both.ttft_ms = 250;
  both.tpot_ms = 150;
  // r0 meets both; r1 misses TPOT (200 ms); r2 misses TTFT (300 ms)
  EXPECT_DOUBLE_EQ(sb::calculate_metrics(sample(), 2.0, {}, both).request_goodput, 0.5);
  sb::GoodputSlo tpot;
  tpot.tpot_ms = 150;  // r0 and r2 (TPOT 0 for one token)
  EXPECT_DOUBLE_EQ(sb::calculate_metrics(sample(), 2.0, {}, tpot).request_goodput, 1.0);
  sb::GoodputSlo e2el;
  e2el.e2el_ms = 800;  // r1 (0.8 <= 0.8) and r2
  EXPECT_DOUBLE_EQ(sb::calculate_metrics(sample(), 2.0, {}, e2el).request_goodput, 1.0);
  EXPECT_DOUBLE_EQ(sb::calculate_metrics(sample(), 2.0, {}, {}).request_goodput, 0.0);  // no SLO
}

TEST(ServeBenchMetrics, OutputTokensFallBackToTextChunks) {
  sb::RequestOutput o = ok(0.1, 0.5, -1, {0.1, 0.1, 0.1, 0.1}, 8);  // no usage: 5 chunks
  sb::BenchmarkMetrics m = sb::calculate_metrics({o}, 1.0, {}, {});
  EXPECT_EQ(m.total_output, 5);
  EXPECT_NEAR(m.tpot.mean_ms, 100, 1e-6);
}

TEST(ServeBenchMetrics, AllFailedReadsZero) {
  sb::BenchmarkMetrics m = sb::calculate_metrics({failed("a"), failed("b")}, 1.0, {99}, {});
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 2);
  EXPECT_EQ(m.first_error, "a");
  EXPECT_EQ(m.ttft.mean_ms, 0);
  EXPECT_EQ(m.itl.percentiles_ms[0].second, 0);
  EXPECT_EQ(m.request_throughput, 0);
}

TEST(ServeBenchMetrics, ParseGoodput) {
  auto slo = sb::parse_goodput({"ttft:500", "tpot:50.5"});
  ASSERT_TRUE(slo.ok()) << slo.status().message();
  EXPECT_EQ(*slo->ttft_ms, 500);
  EXPECT_EQ(*slo->tpot_ms, 50.5);
  EXPECT_FALSE(slo->e2el_ms.has_value());
  auto one_arg = sb::parse_goodput({"ttft:1 e2el:3000"});
  ASSERT_TRUE(one_arg.ok());
  EXPECT_EQ(*one_arg->e2el_ms, 3000);
  EXPECT_FALSE(sb::parse_goodput({}).value().any());
  EXPECT_CONTAINS(sb::parse_goodput({"latency:5"}).status().message(), "unknown metric 'latency'");
  EXPECT_CONTAINS(sb::parse_goodput({"ttft=5"}).status().message(), "KEY:VALUE");
  EXPECT_CONTAINS(sb::parse_goodput({"ttft:abc"}).status().message(), "KEY:VALUE");
  EXPECT_CONTAINS(sb::parse_goodput({"ttft:-1"}).status().message(), "non-negative");
}

TEST(ServeBenchMetrics, ParsePercentilesAndMetrics) {
  EXPECT_EQ(sb::parse_percentiles("50,90,99").value(), (std::vector<double>{50, 90, 99}));
  EXPECT_EQ(sb::parse_percentiles("99.9").value(), (std::vector<double>{99.9}));
  EXPECT_FALSE(sb::parse_percentiles("101").ok());
  EXPECT_FALSE(sb::parse_percentiles("50,,90").ok());
  EXPECT_FALSE(sb::parse_percentiles("p99").ok());
  EXPECT_EQ(sb::parse_percentile_metrics("ttft,e2el").value(), (std::vector<std::string>{"ttft", "e2el"}));
  EXPECT_CONTAINS(sb::parse_percentile_metrics("ttft,foo").status().message(), "'foo'");
}

TEST(ServeBenchMetrics, ReportLooksLikeVllms) {
  sb::GoodputSlo slo;
  slo.ttft_ms = 250;
  sb::BenchmarkMetrics m = sb::calculate_metrics(sample(), 2.0, {99, 99.9}, slo);
  sb::ReportOptions o;
  o.goodput = true;
  o.max_concurrency = 4;
  const std::string r = sb::format_report(m, o);
  EXPECT_EQ(r.substr(0, 51), "============ Serving Benchmark Result ============\n");
  EXPECT_CONTAINS(r, "\nSuccessful requests:                     3         \n");
  EXPECT_CONTAINS(r, "\nFailed requests:                         1         \n");
  EXPECT_CONTAINS(r, "\nMaximum request concurrency:             4         \n");
  EXPECT_CONTAINS(r, "\nBenchmark duration (s):                  2.00      \n");
  EXPECT_CONTAINS(r, "\nTotal input tokens:                      55        \n");
  EXPECT_CONTAINS(r, "\nTotal generated tokens:                  15        \n");
  EXPECT_CONTAINS(r, "\nRequest throughput (req/s):              1.50      \n");
  EXPECT_CONTAINS(r, "\nRequest goodput (req/s):                 1.00      \n");
  EXPECT_CONTAINS(r, "\nOutput token throughput (tok/s):         7.50      \n");
  EXPECT_CONTAINS(r, "\nTotal Token throughput (tok/s):          35.00     \n");
  EXPECT_CONTAINS(r, "\n---------------Time to First Token----------------\n");
  EXPECT_CONTAINS(r, "\n-----Time per Output Token (excl. 1st token)------\n");
  EXPECT_CONTAINS(r, "\n---------------Inter-token Latency----------------\n");
  EXPECT_CONTAINS(r, "\n----------------End-to-end Latency----------------\n");
  EXPECT_CONTAINS(r, "\nMean TTFT (ms):                          200.00    \n");
  EXPECT_CONTAINS(r, "\nP99 TTFT (ms):                           298.00    \n");
  EXPECT_CONTAINS(r, "\nP99.9 ITL (ms):                          ");
  EXPECT_CONTAINS(r, "\nMedian E2EL (ms):                        800.00    \n");
  EXPECT_EQ(r.substr(r.size() - 51), std::string(50, '=') + "\n");

  o.percentile_metrics = {"ttft"};
  o.goodput = false;
  const std::string only_ttft = sb::format_report(m, o);
  EXPECT_EQ(only_ttft.find("Inter-token"), std::string::npos);
  EXPECT_EQ(only_ttft.find("goodput"), std::string::npos);
}

TEST(ServeBenchMetrics, JsonHasFiguresAndPerRequestArrays) {
  auto outs = sample();
  sb::GoodputSlo slo;
  slo.e2el_ms = 800;
  sb::BenchmarkMetrics m = sb::calculate_metrics(outs, 2.0, {50, 99}, slo);
  sb::ReportOptions o;
  o.goodput = true;
  nlohmann::json j = sb::metrics_json(m, outs, o);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["total_output_tokens"], 15);
  EXPECT_DOUBLE_EQ(j["request_goodput"].get<double>(), 1.0);
  EXPECT_NEAR(j["p99_ttft_ms"].get<double>(), 298, 1e-6);
  EXPECT_NEAR(j["p50_itl_ms"].get<double>(), 100, 1e-6);
  EXPECT_NEAR(j["std_tpot_ms"].get<double>(), 50, 1e-6);
  EXPECT_EQ(j["ttfts"].size(), 4u);
  EXPECT_EQ(j["itls"][0].size(), 9u);
  EXPECT_EQ(j["output_lens"][3], 0);
  EXPECT_EQ(j["errors"][3], "HTTP 500: boom");
  EXPECT_EQ(j["input_lens"][1], 30);
  EXPECT_EQ(j["first_error"], "HTTP 500: boom");
}
