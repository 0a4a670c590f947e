#include "moe/serve/prometheus.h"

#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "moe/serve/server_metrics.h"

namespace moe::serve {
namespace {

// Every line of the text format 0.0.4 is a comment (# HELP / # TYPE) or a sample:
// name{labels} value.
void expect_parses(const std::string& text) {
  static const std::regex kSample(
      R"re(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\\\|\\"|\\n)*",?)*\})? ([-+]?[0-9.eE+-]+|\+Inf|-Inf|NaN)$)re");
  static const std::regex kComment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*$)");
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_TRUE(std::regex_match(line, kSample) || std::regex_match(line, kComment)) << "bad line: " << line;
  }
}

TEST(Metrics, CounterGaugeLabels) {
  MetricsRegistry reg;
  reg.counter("moe:c_total", "A counter.", {{"b", "2"}, {"a", "1"}}).inc(2);
  reg.counter("moe:c_total", "", {{"a", "1"}, {"b", "2"}}).inc();  // same series, labels in any order
  reg.counter("moe:c_total", "", {{"a", "x\"y\\z\nw"}, {"b", ""}}).inc();
  reg.gauge("moe:g", "A gauge.\nTwo lines.").set(0.25);
  const std::string text = reg.render();
  EXPECT_EQ(text,
            "# HELP moe:c_total A counter.\n"
            "# TYPE moe:c_total counter\n"
            "moe:c_total{a=\"1\",b=\"2\"} 3\n"
            "moe:c_total{a=\"x\\\"y\\\\z\\nw\",b=\"\"} 1\n"
            "# HELP moe:g A gauge.\\nTwo lines.\n"
            "# TYPE moe:g gauge\n"
            "moe:g 0.25\n");
  expect_parses(text);
}

TEST(Metrics, HistogramBucketsSumCount) {
  MetricsRegistry reg;
  Histogram& h = reg.histogram("moe:h_seconds", "H.", {0.1, 0.5, 1});
  for (double v : {0.05, 0.1, 0.3, 0.7, 2.0}) h.observe(v);
  const std::string text = reg.render();
  // le is inclusive: 0.1 falls in the 0.1 bucket. Cumulative counts.
  EXPECT_EQ(text,
            "# HELP moe:h_seconds H.\n"
            "# TYPE moe:h_seconds histogram\n"
            "moe:h_seconds_bucket{le=\"0.1\"} 2\n"
            "moe:h_seconds_bucket{le=\"0.5\"} 3\n"
            "moe:h_seconds_bucket{le=\"1\"} 4\n"
            "moe:h_seconds_bucket{le=\"+Inf\"} 5\n"
            "moe:h_seconds_sum 3.15\n"
            "moe:h_seconds_count 5\n");
  expect_parses(text);
}

TEST(Metrics, ValueFormatting) {
  EXPECT_EQ(format_metric_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_metric_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(format_metric_value(0.0 / 0.0), "NaN");
  EXPECT_EQ(format_metric_value(12345678901.0), "12345678901");
  EXPECT_EQ(format_metric_value(0.001), "0.001");
}

TEST(Metrics, ConcurrentUpdates) {
  MetricsRegistry reg;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&reg, t] {
      for (int i = 0; i < 1000; ++i) {
        reg.counter("moe:n_total", "N.", {{"t", std::to_string(t % 2)}}).inc();
        reg.histogram("moe:x", "X.", {1.0}).observe(0.5);
        if (i % 100 == 0) (void)reg.render();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(reg.counter("moe:n_total", "", {{"t", "0"}}).value(), 2000);
  EXPECT_EQ(reg.histogram("moe:x", "", {1.0}).data().count, 4000u);
}

TEST(ServerMetrics, RendersSnapshotAndExpertCounters) {
  ServerMetrics m;
  m.count_http("/v1/completions", 200);
  m.count_http("/v1/completions", 400);
  m.count_finished("length");
  m.ttft().observe(0.02);
  ServiceSnapshot s;
  s.running = 3;
  s.waiting = 2;
  s.kv_blocks_total = 8;
  s.kv_blocks_used = 2;
  s.prompt_tokens_total = 11;
  s.generation_tokens_total = 22;
  s.moe_layers = {0, 3};
  s.expert_tokens = {{1, 2}, {3, 4}};
  const std::string text = m.render(s);
  expect_parses(text);
  for (const char* line : {"moe:num_requests_running 3\n", "moe:num_requests_waiting 2\n",
                           "moe:kv_cache_usage_perc 0.25\n", "moe:prompt_tokens_total 11\n",
                           "moe:generation_tokens_total 22\n",
                           "moe:http_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1\n",
                           "moe:request_success_total{finished_reason=\"length\"} 1\n",
                           "moe:expert_routed_tokens_total{expert=\"1\",layer=\"3\"} 4\n",
                           "moe:time_to_first_token_seconds_count 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin\n" << text;
  }
}

}  // namespace
}  // namespace moe::serve
