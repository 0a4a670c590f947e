// `moe bench serve` end to end: the binary against the in-process fake server, the
// result table and JSON, progress on stderr, and bad input (exit 1, or 2 for the
// parser's own errors).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "fake_openai_server.h"
#include "test_util.h"

using moe::testing::FakeOpenAiServer;
using moe::testing::FakeServerConfig;
using moe::testing::run_command;
using moe::testing::sh_quote;

namespace {

std::string fixture(const std::string& name) { return moe::testing::source_dir() + "/tests/serve_bench/data/" + name; }

std::string bench(const std::string& args) { return sh_quote(moe::testing::moe_binary()) + " bench serve " + args; }

FakeServerConfig fast() {
  FakeServerConfig c;
  c.ttft_ms = 20;
  c.itl_ms = 2;
  return c;
}

}  // namespace

TEST(ServeBenchCli, ShareGptRunPrintsTableAndWritesJson) {
  FakeOpenAiServer server(fast());
  const std::string dir = moe::testing::make_temp_dir("bench_serve");
  const std::string json_path = dir + "/result.json";
  auto r = run_command(bench("--base-url " + server.url() + " --dataset " + sh_quote(fixture("sharegpt_small.json")) +
                             " --num-prompts 4 --max-concurrency 2 --sharegpt-output-len 6 --goodput ttft:5000 "
                             "--percentiles 50,99 --ignore-eos --result-json " +
                             sh_quote(json_path)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "============ Serving Benchmark Result ============");
  EXPECT_CONTAINS(r.output, "Successful requests:                     4 ");
  EXPECT_CONTAINS(r.output, "Failed requests:                         0 ");
  EXPECT_CONTAINS(r.output, "Maximum request concurrency:             2 ");
  EXPECT_CONTAINS(r.output, "Total generated tokens:                  24 ");
  EXPECT_CONTAINS(r.output, "Request goodput (req/s):");
  EXPECT_CONTAINS(r.output, "P99 ITL (ms):");
  EXPECT_CONTAINS(r.output, "Model: fake-model at " + server.url() + "/v1/completions");
  EXPECT_CONTAINS(r.output, "Traffic request rate: inf");
  EXPECT_CONTAINS(r.output, "Burstiness factor: 1.0 (Poisson process)");
  // progress on stderr (not a terminal here): whole lines, no carriage returns
  EXPECT_CONTAINS(r.output, "4/4 requests done (0 failed)");
  EXPECT_EQ(r.output.find('\r'), std::string::npos);

  nlohmann::json j = nlohmann::json::parse(moe::testing::read_file(json_path));
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["model_id"], "fake-model");
  EXPECT_EQ(j["max_concurrency"], 2);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["total_output_tokens"], 24);
  EXPECT_EQ(j["total_input_tokens"], 28);  // the fake server's usage: 7 per prompt
  EXPECT_EQ(j["ttfts"].size(), 4u);
  EXPECT_EQ(j["itls"][0].size(), 5u);
  EXPECT_GT(j["p99_ttft_ms"].get<double>(), 19.0);
  EXPECT_TRUE(j.contains("median_e2el_ms"));
  EXPECT_EQ(j["goodput_slo_ms"]["ttft"], 5000.0);
  for (const auto& b : server.bodies()) EXPECT_EQ(b["ignore_eos"], true);
  std::filesystem::remove_all(dir);
}

TEST(ServeBenchCli, TraceReplayAndChat) {
  FakeOpenAiServer server(fast());
  auto r = run_command(bench("--base-url " + server.url() + "/ --endpoint /v1/chat/completions --dataset " +
                             sh_quote(fixture("trace_small.csv")) +
                             " --num-prompts 4 --trace-time-scale 100 --trace-token-scale 0.05 --disable-progress"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Traffic: trace arrival times (time scale 100.0)");
  EXPECT_CONTAINS(r.output, "Successful requests:                     4 ");
  EXPECT_EQ(r.output.find("requests done"), std::string::npos);
  // output lengths 20, 300, 5, 400 scaled by 0.05: 1, 15, 1 (rounded from 0.25, at least 1), 20
  EXPECT_CONTAINS(r.output, "Total generated tokens:                  37 ");
  auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 4u);
  EXPECT_TRUE(bodies[0].contains("messages"));
}

TEST(ServeBenchCli, MaxModelLenFromTheServerFlagOrDefault) {
  FakeServerConfig cfg = fast();
  cfg.max_model_len = 40;  // c0 (15 + 10) and c1 (18 + 10) fit; c6 (19 + 60) does not
  FakeOpenAiServer server(cfg);
  const std::string args = "--base-url " + server.url() + " --dataset " + sh_quote(fixture("sharegpt_small.json")) +
                           " --num-prompts 2 --default-output-len 10 --disable-progress";
  auto r = run_command(bench(args));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Max model length: 40 (the server)");
  EXPECT_CONTAINS(r.output, " longer than 40 tokens (prompt + output)");
  auto flag = run_command(bench(args + " --max-model-len 64"));
  ASSERT_EQ(flag.exit_code, 0) << flag.output;
  EXPECT_CONTAINS(flag.output, "Max model length: 64 (--max-model-len)");

  FakeServerConfig silent = fast();
  silent.max_model_len = 0;  // not reported
  FakeOpenAiServer other(silent);
  auto d = run_command(bench("--base-url " + other.url() + " --dataset " + sh_quote(fixture("sharegpt_small.json")) +
                             " --num-prompts 2 --disable-progress"));
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_CONTAINS(d.output, "Max model length: 512 (default)");
}

TEST(ServeBenchCli, TokenizerCountsExactly) {
  FakeOpenAiServer server(fast());
  auto r = run_command(bench("--base-url " + server.url() + " --dataset " + sh_quote(fixture("sharegpt_small.json")) +
                             " --num-prompts 3 --disable-progress --tokenizer " +
                             sh_quote(moe::testing::tiny_model_dir())));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Successful requests:                     3 ");
}

TEST(ServeBenchCli, FailedRequestsAreCountedAndTheFirstErrorShown) {
  FakeServerConfig cfg = fast();
  cfg.fail_every = 2;
  FakeOpenAiServer server(cfg);
  auto r = run_command(bench("--base-url " + server.url() + " --dataset " + sh_quote(fixture("sharegpt_small.json")) +
                             " --num-prompts 4 --max-concurrency 1 --disable-progress"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Successful requests:                     2 ");
  EXPECT_CONTAINS(r.output, "Failed requests:                         2 ");
  EXPECT_CONTAINS(r.output, "2 of 4 requests failed; the first (request 1): HTTP 400: ");
  EXPECT_CONTAINS(r.output, "prompt too long");
}

TEST(ServeBenchCli, AllFailedExitsOne) {
  FakeServerConfig cfg = fast();
  cfg.fail_status = 500;
  FakeOpenAiServer server(cfg);
  auto r = run_command(bench("--base-url " + server.url() + " --dataset " + sh_quote(fixture("sharegpt_small.json")) +
                             " --num-prompts 2 --disable-progress"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: all 2 requests failed; the first: HTTP 500");
}

TEST(ServeBenchCli, UnreachableServerIsAQuickError) {
  int port;
  {
    FakeOpenAiServer gone;
    port = gone.port();
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_command(bench("--base-url http://127.0.0.1:" + std::to_string(port) + " --dataset " +
                             sh_quote(fixture("sharegpt_small.json")) + " --num-prompts 2 --connect-timeout 2"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: cannot reach http://127.0.0.1:" + std::to_string(port) + "/v1/models");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(ServeBenchCli, TraceShorterThanNumPrompts) {
  FakeOpenAiServer server(fast());
  auto r = run_command(bench("--base-url " + server.url() + " --dataset " + sh_quote(fixture("trace_small.csv")) +
                             " --num-prompts 9"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: " + fixture("trace_small.csv") + ": the trace has 4 requests, fewer than --num-prompts 9");
  EXPECT_EQ(server.requests(), 0);
}

TEST(ServeBenchCli, BadInput) {
  const std::string url = " --base-url http://127.0.0.1:1";  // never contacted: the flags fail first
  const std::string ds = " --dataset " + sh_quote(fixture("sharegpt_small.json"));
  struct Case {
    std::string args;
    int exit_code;
    std::string message;
  };
  const Case cases[] = {
      {url + " --dataset /nonexistent/prompts.json", 1, "error: --dataset: cannot open '/nonexistent/prompts.json'"},
      {url + " --dataset " + sh_quote(fixture("trace_small.csv") + ".txt"), 1, "pass --dataset-format"},
      {url + ds + " --num-prompts 0", 1, "error: --num-prompts must be >= 1"},
      {url + ds + " --request-rate fast", 1, "error: --request-rate: 'fast'"},
      {url + ds + " --request-rate 0", 1, "error: --request-rate"},
      {url + ds + " --burstiness 0", 1, "error: --burstiness must be > 0"},
      {url + ds + " --max-concurrency -2", 1, "error: --max-concurrency"},
      {url + ds + " --goodput latency:5", 1, "error: --goodput: unknown metric 'latency'"},
      {url + ds + " --percentiles 50,120", 1, "error: --percentiles: '120'"},
      {url + ds + " --endpoint /v1/embeddings", 1, "is not an OpenAI completions endpoint"},
      {" --base-url localhost:8000" + ds, 1, "error: --base-url: 'localhost:8000' must start with http://"},
      {url + ds + " --dataset-format xml", 2, "--dataset-format"},
      {ds, 2, "--base-url"},
      {url + ds + " --tokenizer /nonexistent/model", 1, "error: --tokenizer: "},
      {url + ds + " --trace-time-scale 0", 1, "error: --trace-time-scale must be > 0"},
      {url + ds + " --max-model-len 4", 1, "error: --max-model-len must be >= 8"},
  };
  for (const Case& c : cases) {
    auto r = run_command(bench(c.args));
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.output;
    EXPECT_CONTAINS(r.output, c.message) << c.args;
  }
}
