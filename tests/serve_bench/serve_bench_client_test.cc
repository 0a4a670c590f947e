// End to end against an in-process fake OpenAI SSE server: the request body, TTFT and
// ITL against known server delays, concurrency limits, 64 concurrent streams,
// Poisson send times, HTTP and in-stream errors, an unreachable server.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <set>

#include "contains_util.h"
#include "fake_openai_server.h"
#include "moe/serve_bench/client.h"
#include "moe/serve_bench/serving_metrics.h"
#include "moe/serve_bench/schedule.h"

namespace sb = moe::serve_bench;
using moe::testing::FakeOpenAiServer;
using moe::testing::FakeServerConfig;

namespace {

// Upper bounds are loose: the tests share 2 cores and may run under ASan.
constexpr double kSlack = 1.0;

sb::ClientOptions options_for(const FakeOpenAiServer& s, const std::string& endpoint = "/v1/completions") {
  sb::ClientOptions o;
  o.base = sb::parse_base_url(s.url()).value();
  o.endpoint = endpoint;
  o.model = "fake-model";
  o.connect_timeout_s = 2;
  o.read_timeout_s = 30;
  return o;
}

std::vector<sb::SampleRequest> requests(int n, int output_len) {
  std::vector<sb::SampleRequest> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    r[static_cast<size_t>(i)].prompt = "Hello number " + std::to_string(i);
    r[static_cast<size_t>(i)].prompt_len = 6;
    r[static_cast<size_t>(i)].output_len = output_len;
  }
  return r;
}

}  // namespace

TEST(ServeBenchClient, ParseBaseUrl) {
  auto a = sb::parse_base_url("http://127.0.0.1:8000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->origin, "http://127.0.0.1:8000");
  EXPECT_EQ(a->prefix, "");
  auto b = sb::parse_base_url("https://api.example.com/openai/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->origin, "https://api.example.com");
  EXPECT_EQ(b->prefix, "/openai");
  EXPECT_CONTAINS(sb::parse_base_url("localhost:8000").status().message(), "must start with http://");
  EXPECT_FALSE(sb::parse_base_url("http://").ok());
  EXPECT_FALSE(sb::parse_base_url("http://host:port").ok());
  EXPECT_FALSE(sb::parse_base_url("http://host:99999").ok());
}

TEST(ServeBenchClient, RequestBody) {
  sb::ClientOptions o;
  o.model = "m";
  sb::SampleRequest r;
  r.prompt = "hi";
  r.output_len = 9;
  nlohmann::json b = sb::request_body(o, r);
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["prompt"], "hi");
  EXPECT_EQ(b["max_tokens"], 9);
  EXPECT_EQ(b["temperature"], 0.0);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_FALSE(b.contains("ignore_eos"));
  o.endpoint = "/v1/chat/completions";
  o.ignore_eos = true;
  nlohmann::json c = sb::request_body(o, r);
  EXPECT_FALSE(c.contains("prompt"));
  EXPECT_EQ(c["messages"][0]["role"], "user");
  EXPECT_EQ(c["messages"][0]["content"], "hi");
  EXPECT_EQ(c["ignore_eos"], true);
  // a conversation's messages go as they are on chat; completions get the text
  r.messages = {{"system", "be brief"}, {"user", "hi"}};
  nlohmann::json m = sb::request_body(o, r);
  ASSERT_EQ(m["messages"].size(), 2u);
  EXPECT_EQ(m["messages"][0]["role"], "system");
  EXPECT_EQ(m["messages"][0]["content"], "be brief");
  EXPECT_EQ(m["messages"][1]["role"], "user");
  o.endpoint = "/v1/completions";
  EXPECT_EQ(sb::request_body(o, r)["prompt"], "hi");
  EXPECT_FALSE(sb::request_body(o, r).contains("messages"));
}

TEST(ServeBenchClient, StreamsWithKnownDelaysUnderAConcurrencyLimit) {
  FakeServerConfig cfg;
  cfg.ttft_ms = 60;
  cfg.itl_ms = 20;
  FakeOpenAiServer server(cfg);
  sb::ClientOptions o = options_for(server);
  o.api_key = "secret";
  o.ignore_eos = true;
  auto models = sb::list_models(o);
  ASSERT_TRUE(models.ok()) << models.status().message();
  EXPECT_EQ(models->front().id, "fake-model");
  EXPECT_EQ(models->front().max_model_len, 512);

  auto reqs = requests(8, 5);
  std::atomic<int> calls{0}, last_done{-1};
  sb::RunResult run = sb::run_benchmark(o, reqs, std::vector<double>(8, 0.0), /*max_concurrency=*/4,
                                        [&](int done, int, int total, double) {
                                          EXPECT_EQ(total, 8);
                                          ++calls;
                                          last_done = done;
                                        },
                                        0.05);
  ASSERT_EQ(run.outputs.size(), 8u);
  EXPECT_LE(server.max_in_flight(), 4);
  EXPECT_GE(server.max_in_flight(), 2);
  EXPECT_GE(calls.load(), 1);
  EXPECT_EQ(last_done.load(), 8);
  // two waves of 4: each request takes >= 60 + 4 * 20 ms
  EXPECT_GE(run.duration_s, 2 * 0.140);
  for (const sb::RequestOutput& out : run.outputs) {
    ASSERT_TRUE(out.success) << out.error;
    EXPECT_EQ(out.http_status, 200);
    EXPECT_EQ(out.output_tokens, 5);
    EXPECT_EQ(out.prompt_len, 7);  // the server's usage replaces the estimate (6)
    EXPECT_EQ(out.generated_text, "t0 t1 t2 t3 t4 ");
    EXPECT_EQ(out.finish_reason, "length");
    EXPECT_GE(out.ttft_s, 0.059);
    EXPECT_LT(out.ttft_s, 0.060 + kSlack);
    ASSERT_EQ(out.itl_s.size(), 4u);
    double sum = 0;
    for (double g : out.itl_s) sum += g;
    // The server sleeps 4 x 20 ms between the first and last chunks; a client thread
    // stalled on a busy machine may read two chunks at once, hence some margin.
    EXPECT_GE(sum, 0.060);
    EXPECT_LT(sum, 0.080 + kSlack);
    EXPECT_GE(out.latency_s, out.ttft_s + sum - 1e-9);
    EXPECT_GE(out.start_s, 0.0);
  }
  sb::BenchmarkMetrics m = sb::calculate_metrics(run.outputs, run.duration_s, {50, 99}, {});
  EXPECT_EQ(m.completed, 8);
  EXPECT_EQ(m.total_output, 40);
  EXPECT_EQ(m.total_input, 56);
  EXPECT_GE(m.tpot.mean_ms, 15.0);
  EXPECT_GE(m.ttft.median_ms, 59.0);

  auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 8u);  // /v1/models is not recorded
  for (const auto& b : bodies) {
    EXPECT_EQ(b["model"], "fake-model");
    EXPECT_EQ(b["max_tokens"], 5);
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
  }
  for (const auto& h : server.auth_headers()) EXPECT_EQ(h, "Bearer secret");
}

TEST(ServeBenchClient, ChatStreamRoleChunkIsNotTheFirstToken) {
  FakeServerConfig cfg;
  cfg.ttft_ms = 80;
  FakeOpenAiServer server(cfg);
  sb::RunResult run = sb::run_benchmark(options_for(server, "/v1/chat/completions"), requests(2, 3), {0, 0}, 0);
  for (const auto& out : run.outputs) {
    ASSERT_TRUE(out.success) << out.error;
    EXPECT_GE(out.ttft_s, 0.079);  // the role chunk came at ~0 ms
    EXPECT_EQ(out.generated_text, "t0 t1 t2 ");
    EXPECT_EQ(out.itl_s.size(), 2u);
  }
  // Both requests start at t=0, so they may reach the server in either order.
  std::set<std::string> contents;
  for (const auto& b : server.bodies()) contents.insert(b["messages"][0]["content"].get<std::string>());
  EXPECT_EQ(contents, (std::set<std::string>{"Hello number 0", "Hello number 1"}));
}

TEST(ServeBenchClient, SixtyFourConcurrentStreams) {
  FakeServerConfig cfg;
  cfg.ttft_ms = 300;
  cfg.itl_ms = 10;
  FakeOpenAiServer server(cfg);
  sb::RunResult run = sb::run_benchmark(options_for(server), requests(64, 4), std::vector<double>(64, 0.0), 0);
  int ok = 0;
  std::string first_error;
  for (const auto& out : run.outputs) {
    ok += out.success ? 1 : 0;
    if (!out.success && first_error.empty()) first_error = out.error;
  }
  EXPECT_EQ(ok, 64) << first_error;
  EXPECT_GE(server.max_in_flight(), 32);  // all were in flight together (64 unless the machine is very slow)
  // 64 requests of ~0.33 s each, overlapped: far less than serially (21 s)
  EXPECT_LT(run.duration_s, 5.0);
}

TEST(ServeBenchClient, PoissonSendTimes) {
  FakeServerConfig cfg;
  cfg.ttft_ms = 5;
  cfg.itl_ms = 1;
  FakeOpenAiServer server(cfg);
  auto arrivals = sb::request_arrivals(10, 20.0, 1.0, 3).value();
  sb::RunResult run = sb::run_benchmark(options_for(server), requests(10, 2), arrivals, 0);
  for (size_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(run.outputs[i].success) << run.outputs[i].error;
    EXPECT_GE(run.outputs[i].start_s, arrivals[i] - 1e-3) << i;
    EXPECT_LT(run.outputs[i].start_s, arrivals[i] + kSlack) << i;
  }
  EXPECT_GE(run.duration_s, arrivals.back());
}

TEST(ServeBenchClient, HttpErrorsAreCountedWithTheFirstMessage) {
  FakeServerConfig cfg;
  cfg.fail_every = 2;  // requests 2 and 4 (in arrival order at the server) fail
  cfg.ttft_ms = 1;
  FakeOpenAiServer server(cfg);
  sb::RunResult run = sb::run_benchmark(options_for(server), requests(4, 2), {0, 0.05, 0.1, 0.15}, 1);
  sb::BenchmarkMetrics m = sb::calculate_metrics(run.outputs, run.duration_s, {99}, {});
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 2);
  EXPECT_EQ(m.first_error_index, 1);
  EXPECT_CONTAINS(m.first_error, "HTTP 400");
  EXPECT_CONTAINS(m.first_error, "prompt too long");
  EXPECT_EQ(run.outputs[1].http_status, 400);
}

TEST(ServeBenchClient, ErrorEventAndMissingUsage) {
  {
    FakeServerConfig cfg;
    cfg.error_event = true;
    cfg.ttft_ms = 1;
    FakeOpenAiServer server(cfg);
    sb::RunResult run = sb::run_benchmark(options_for(server), requests(1, 3), {0}, 0);
    EXPECT_FALSE(run.outputs[0].success);
    EXPECT_CONTAINS(run.outputs[0].error, "engine failure");
  }
  {
    FakeServerConfig cfg;
    cfg.usage = false;
    cfg.ttft_ms = 1;
    FakeOpenAiServer server(cfg);
    sb::RunResult run = sb::run_benchmark(options_for(server), requests(1, 3), {0}, 0);
    ASSERT_TRUE(run.outputs[0].success) << run.outputs[0].error;
    EXPECT_FALSE(run.outputs[0].usage_reported);
    EXPECT_EQ(run.outputs[0].prompt_len, 6);  // the estimate
    EXPECT_EQ(sb::calculate_metrics(run.outputs, 1.0, {}, {}).total_output, 3);  // one token per chunk
  }
}

TEST(ServeBenchClient, UnreachableServerFailsFast) {
  int port;
  {
    FakeOpenAiServer gone;
    port = gone.port();
  }  // stopped: the port refuses connections now
  sb::ClientOptions o;
  o.base = sb::parse_base_url("http://127.0.0.1:" + std::to_string(port)).value();
  o.model = "x";
  o.connect_timeout_s = 2;
  const auto t0 = std::chrono::steady_clock::now();
  auto models = sb::list_models(o);
  EXPECT_EQ(models.status().code(), moe::StatusCode::kUnavailable);
  EXPECT_CONTAINS(models.status().message(), "cannot reach http://127.0.0.1:" + std::to_string(port) + "/v1/models");
  sb::RequestOutput out = sb::send_request(o, requests(1, 2)[0], std::chrono::steady_clock::now());
  EXPECT_FALSE(out.success);
  EXPECT_CONTAINS(out.error, "cannot complete the request");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 4.0);
}
