// The vLLM-compatible metric names (server_metrics.h) against FakeService: every family
// vLLM's Grafana dashboard queries exists with its type and the model_name label from
// the start, and the per-request families move by exactly what requests of known
// sizes imply (counts, sums of prompt / generation tokens and max_tokens).
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "moe/serve/http_server.h"
#include "serve/fake_service.h"
#include "serve/metrics_text.h"

namespace moe::serve {
namespace {

using nlohmann::json;
using testing::FakeService;
using testing::grafana_families;
using testing::parse_exposition;

class VllmMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.served_model_name = "tiny-model";
    server_ = std::make_unique<HttpServer>(service_, std::move(o));
    ASSERT_TRUE(server_->start().ok());
  }
  testing::Exposition scrape() {
    httplib::Client c("127.0.0.1", server_->port());
    auto r = c.Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    return parse_exposition(r ? r->body : "");
  }
  FakeService service_{256};
  std::unique_ptr<HttpServer> server_;
  const std::map<std::string, std::string> model_{{"model_name", "tiny-model"}};
};

TEST_F(VllmMetricsTest, EveryDashboardFamilyExistsWithItsTypeAndModelName) {
  const testing::Exposition m = scrape();
  for (const auto& [name, type] : grafana_families()) {
    std::string family = name;
    EXPECT_EQ(m.types.count(family) ? m.types.at(family) : "missing", type) << family;
    if (type == "histogram") {
      EXPECT_TRUE(m.has(name + "_bucket", {{"model_name", "tiny-model"}, {"le", "+Inf"}})) << name;
      EXPECT_TRUE(m.has(name + "_sum", model_)) << name;
      EXPECT_TRUE(m.has(name + "_count", model_)) << name;
    } else {
      EXPECT_TRUE(m.has(name, model_)) << name;
    }
  }
  for (const char* extra : {"vllm:request_inference_time_seconds", "vllm:iteration_tokens_total",
                            "vllm:request_params_n", "vllm:request_params_max_tokens"}) {
    EXPECT_EQ(m.types.count(extra) ? m.types.at(extra) : "missing", "histogram") << extra;
  }
  EXPECT_EQ(m.types.at("vllm:num_preemptions_total"), "counter");
  EXPECT_EQ(m.value("vllm:num_preemptions_total", model_), 0);
  EXPECT_EQ(m.value("vllm:request_success_total", {{"model_name", "tiny-model"}, {"finished_reason", "stop"}}), 0);
  // Ours stay.
  EXPECT_TRUE(m.has("moe:num_requests_running"));
  EXPECT_TRUE(m.has("moe:time_to_first_token_seconds_count"));
}

TEST_F(VllmMetricsTest, PerRequestFamiliesMoveWithRequests) {
  httplib::Client c("127.0.0.1", server_->port());
  // FakeService: prompt tokens = 1 + bytes; one token per step; "length" at max_tokens.
  const std::vector<std::pair<std::string, int>> requests = {{"abcdef", 3}, {"hello world", 5}, {"xy", 2}};
  double prompt_sum = 0, gen_sum = 0;
  for (const auto& [prompt, max_tokens] : requests) {
    auto r = c.Post("/v1/completions", json({{"prompt", prompt}, {"max_tokens", max_tokens}}).dump(),
                    "application/json");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "");
    prompt_sum += 1 + static_cast<double>(prompt.size());
    gen_sum += max_tokens;
  }
  const testing::Exposition m = scrape();
  const double n = static_cast<double>(requests.size());
  EXPECT_EQ(m.value("vllm:request_success_total", {{"model_name", "tiny-model"}, {"finished_reason", "length"}}), n);
  EXPECT_EQ(m.value("vllm:request_prompt_tokens_count", model_), n);
  EXPECT_EQ(m.value("vllm:request_prompt_tokens_sum", model_), prompt_sum);
  EXPECT_EQ(m.value("vllm:request_generation_tokens_sum", model_), gen_sum);
  EXPECT_EQ(m.value("vllm:request_max_num_generation_tokens_sum", model_), gen_sum);
  EXPECT_EQ(m.value("vllm:request_params_max_tokens_sum", model_), gen_sum);
  EXPECT_EQ(m.value("vllm:request_params_n_sum", model_), n);
  for (const char* h : {"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
                        "vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds",
                        "vllm:request_time_per_output_token_seconds", "vllm:time_to_first_token_seconds",
                        "vllm:e2e_request_latency_seconds"}) {
    EXPECT_EQ(m.value(std::string(h) + "_count", model_), n) << h;
  }
  // Copies of ours: same counts and sums.
  EXPECT_EQ(m.value("vllm:time_to_first_token_seconds_sum", model_), m.value("moe:time_to_first_token_seconds_sum"));
  EXPECT_EQ(m.value("vllm:inter_token_latency_seconds_count", model_),
            m.value("moe:inter_token_latency_seconds_count"));
  EXPECT_EQ(m.value("vllm:time_per_output_token_seconds_count", model_),
            m.value("moe:inter_token_latency_seconds_count"));
  // Buckets are cumulative and end with the count: 2 <= 2 tokens, all 3 <= 5.
  EXPECT_EQ(m.value("vllm:request_generation_tokens_bucket", {{"model_name", "tiny-model"}, {"le", "2"}}), 1);
  EXPECT_EQ(m.value("vllm:request_generation_tokens_bucket", {{"model_name", "tiny-model"}, {"le", "5"}}), 3);
  EXPECT_EQ(m.value("vllm:request_generation_tokens_bucket", {{"model_name", "tiny-model"}, {"le", "+Inf"}}), 3);
}

TEST(ServerMetricsVllmTest, SnapshotFamiliesMirrorTheEngine) {
  ServerMetrics metrics;
  metrics.set_model_name("m", 100);
  ServiceSnapshot s;
  s.running = 3;
  s.waiting = 2;
  s.kv_blocks_total = 8;
  s.kv_blocks_used = 2;
  s.prompt_tokens_total = 40;
  s.generation_tokens_total = 9;
  s.iteration_tokens.assign(std::size(kIterationTokenBounds) + 1, 0);
  s.iteration_tokens[0] = 5;  // five steps of 1 token
  s.iteration_tokens[2] = 1;  // one of 9..16
  s.iteration_tokens_sum = 5 + 12;
  const testing::Exposition m = parse_exposition(metrics.render(s));
  const std::map<std::string, std::string> model{{"model_name", "m"}};
  EXPECT_EQ(m.value("vllm:num_requests_running", model), 3);
  EXPECT_EQ(m.value("vllm:num_requests_waiting", model), 2);
  EXPECT_EQ(m.value("vllm:kv_cache_usage_perc", model), 0.25);
  EXPECT_EQ(m.value("vllm:gpu_cache_usage_perc", model), 0.25);
  EXPECT_EQ(m.value("vllm:prompt_tokens_total", model), 40);
  EXPECT_EQ(m.value("vllm:generation_tokens_total", model), 9);
  EXPECT_EQ(m.value("vllm:iteration_tokens_total_bucket", {{"model_name", "m"}, {"le", "1"}}), 5);
  EXPECT_EQ(m.value("vllm:iteration_tokens_total_bucket", {{"model_name", "m"}, {"le", "8"}}), 5);
  EXPECT_EQ(m.value("vllm:iteration_tokens_total_bucket", {{"model_name", "m"}, {"le", "16"}}), 6);
  EXPECT_EQ(m.value("vllm:iteration_tokens_total_count", model), 6);
  EXPECT_EQ(m.value("vllm:iteration_tokens_total_sum", model), 17);
  // Token-count buckets 1, 2, 5, ... up to max_model_len (100).
  EXPECT_TRUE(m.has("vllm:request_prompt_tokens_bucket", {{"model_name", "m"}, {"le", "100"}}));
  EXPECT_FALSE(m.has("vllm:request_prompt_tokens_bucket", {{"model_name", "m"}, {"le", "200"}}));
  // Timings of a final event; an "error" one is not observed.
  SeqEvent ev;
  ev.finished = true;
  ev.finish_reason = "stop";
  ev.prompt_tokens = 7;
  ev.completion_tokens = 5;
  ev.queue_seconds = 0.5;
  ev.prefill_seconds = 0.25;
  ev.decode_seconds = 2.0;
  metrics.observe_finished(ev);
  ev.finish_reason = "error";
  metrics.observe_finished(ev);
  const testing::Exposition after = parse_exposition(metrics.render(s));
  EXPECT_EQ(after.value("vllm:request_queue_time_seconds_sum", model), 0.5);
  EXPECT_EQ(after.value("vllm:request_prefill_time_seconds_sum", model), 0.25);
  EXPECT_EQ(after.value("vllm:request_decode_time_seconds_sum", model), 2.0);
  EXPECT_EQ(after.value("vllm:request_inference_time_seconds_sum", model), 2.25);
  EXPECT_EQ(after.value("vllm:request_time_per_output_token_seconds_sum", model), 0.5);  // 2.0 / (5 - 1)
  EXPECT_EQ(after.value("vllm:request_queue_time_seconds_count", model), 1);
}

}  // namespace
}  // namespace moe::serve
