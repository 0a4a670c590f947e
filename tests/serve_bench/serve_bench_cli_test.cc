// `moe bench serve` end to end: the binary against the in-process fake server, the
// result table and JSON, progress on stderr, the multi-turn and shared-prefix workloads
// against the fake's prefix cache, and bad input (exit 1, or 2 for usage errors: the
// parser's own and flags of the wrong workload).
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
  // the default workload: today's table, no reuse section; the JSON says which it was
  EXPECT_EQ(r.output.find("Prefix Reuse"), std::string::npos);
  EXPECT_EQ(j["workload"], "single");
  EXPECT_EQ(j["cached_tokens"], 0);
  EXPECT_EQ(j["num_prompts"], 4);
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

namespace {

FakeServerConfig caching() {
  FakeServerConfig c = fast();
  c.prefix_cache = true;
  return c;
}

}  // namespace

TEST(ServeBenchCli, MultiTurnReportsPerTurnTtftAndHitRate) {
  FakeOpenAiServer server(caching());
  const std::string dir = moe::testing::make_temp_dir("bench_serve_mt");
  const std::string json_path = dir + "/result.json";
  auto r = run_command(bench("--base-url " + server.url() +
                             " --workload multi-turn --num-conversations 2 --turns 3 --default-output-len 4 "
                             "--max-concurrency 2 --think-time 0.05 --disable-progress --result-json " +
                             sh_quote(json_path)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Synthetic user messages: 6 of 32 words, output length 4");
  EXPECT_CONTAINS(r.output, "Workload: multi-turn, 2 conversations x 3 turns, think time 0.05 s");
  EXPECT_CONTAINS(r.output, "Maximum concurrent conversations: 2");
  EXPECT_CONTAINS(r.output, "Successful requests:                     6 ");
  EXPECT_CONTAINS(r.output, "Prefix Reuse");
  EXPECT_CONTAINS(r.output, "Median TTFT turns 2+ (ms):");
  EXPECT_CONTAINS(r.output, "Stopped early (context full):            0 ");
  // the fake's cache (serve_bench_conversation_runner_test): 35 and 70 of 68 and 103 per conversation
  EXPECT_CONTAINS(r.output, "Cached / prompt tokens, turns 2+:        210 / 342");
  EXPECT_EQ(r.output.find("cached_tokens not reported"), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(moe::testing::read_file(json_path));
  EXPECT_EQ(j["workload"], "multi-turn");
  EXPECT_EQ(j["turns"], 3);
  EXPECT_EQ(j["num_conversations"], 2);
  EXPECT_EQ(j["num_prompts"], 6);
  EXPECT_EQ(j["cached_tokens"], 210);
  EXPECT_EQ(j["prompt_tokens"], 342 + 2 * 33);
  EXPECT_DOUBLE_EQ(j["prefix_hit_rate_later"].get<double>(), 210.0 / 342.0);
  EXPECT_GT(j["ttft_turn1_ms_median"].get<double>(), 19.0);
  EXPECT_GT(j["ttft_later_ms_median"].get<double>(), 19.0);
  EXPECT_EQ(j["turn_ids"].size(), 6u);
  EXPECT_EQ(j["cached_tokens_per_request"].size(), 6u);
  EXPECT_TRUE(j["dataset"].is_null());
  EXPECT_EQ(j["scheduled_arrivals"].size(), 2u);  // one per conversation
  EXPECT_EQ(server.requests(), 6);
  std::filesystem::remove_all(dir);
}

TEST(ServeBenchCli, MultiTurnFromShareGptOnChatStopsAtTheContext) {
  FakeServerConfig cfg = caching();
  cfg.max_model_len = 60;
  FakeOpenAiServer server(cfg);
  auto r = run_command(bench("--base-url " + server.url() + " --endpoint /v1/chat/completions --dataset " +
                             sh_quote(fixture("sharegpt_small.json")) +
                             " --workload multi-turn --num-conversations 2 --turns 4 --sharegpt-output-len 8 "
                             "--disable-progress --tokenizer " + sh_quote(moe::testing::tiny_model_dir())));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Max model length: 60 (the server)");
  // four turns of ShareGPT prompts and 8-token answers do not fit 60 tokens
  EXPECT_CONTAINS(r.output, "Stopped early (context full):            2 ");
  EXPECT_CONTAINS(r.output, "Failed requests:                         0 ");
  auto bodies = server.bodies();
  ASSERT_FALSE(bodies.empty());
  EXPECT_LT(bodies.size(), 8u);
  bool saw_history = false;
  for (const auto& b : bodies) {
    ASSERT_TRUE(b.contains("messages"));
    if (b["messages"].size() == 3) saw_history = true;
    EXPECT_EQ(b["max_tokens"], 8);
  }
  EXPECT_TRUE(saw_history);
}

TEST(ServeBenchCli, SharedPrefixSharesTheSystemPrompt) {
  FakeOpenAiServer server(caching());
  const std::string dir = moe::testing::make_temp_dir("bench_serve_sp");
  const std::string json_path = dir + "/result.json";
  auto r = run_command(bench("--base-url " + server.url() +
                             " --workload shared-prefix --shared-prefix-tokens 64 --num-prompts 4 --max-concurrency 1 "
                             "--default-output-len 4 --disable-progress --result-json " + sh_quote(json_path)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Workload: shared-prefix, a system prompt of 64 tokens before each of 4 questions");
  // one at a time: the first request finds nothing, each later one the 63 prefix words
  EXPECT_CONTAINS(r.output, "Cached / prompt tokens, requests 2+:     189 / 288");
  EXPECT_CONTAINS(r.output, "Prefix hit rate, requests 2+ (%):        65.62");
  auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 4u);
  const std::string p0 = bodies[0]["prompt"].get<std::string>();
  const std::string prefix = p0.substr(0, p0.find("\n\n") + 2);
  EXPECT_EQ(moe::testing::fake_words(prefix).size(), 63u);
  for (const auto& b : bodies) EXPECT_EQ(b["prompt"].get<std::string>().rfind(prefix, 0), 0u);
  nlohmann::json j = nlohmann::json::parse(moe::testing::read_file(json_path));
  EXPECT_EQ(j["workload"], "shared-prefix");
  EXPECT_EQ(j["shared_prefix_tokens"], 64);
  EXPECT_EQ(j["cached_tokens"], 189);
  EXPECT_DOUBLE_EQ(j["prefix_hit_rate_later"].get<double>(), 189.0 / 288.0);
  EXPECT_TRUE(j["turns"].is_null());
  std::filesystem::remove_all(dir);
}

TEST(ServeBenchCli, SharedPrefixOnChatWithoutCachedTokensSaysSo) {
  FakeOpenAiServer server(fast());
  auto r = run_command(bench("--base-url " + server.url() + " --endpoint /v1/chat/completions --dataset " +
                             sh_quote(fixture("sharegpt_small.json")) +
                             " --workload shared-prefix --shared-prefix-tokens 16 --num-prompts 3 --sharegpt-output-len 4"
                             " --disable-progress"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "cached_tokens not reported by the server");
  auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 3u);
  for (const auto& b : bodies) {
    ASSERT_EQ(b["messages"].size(), 2u);
    EXPECT_EQ(b["messages"][0]["role"], "system");
    EXPECT_EQ(b["messages"][0]["content"], bodies[0]["messages"][0]["content"]);
    EXPECT_EQ(b["messages"][1]["role"], "user");
  }
  EXPECT_NE(bodies[0]["messages"][1]["content"], bodies[1]["messages"][1]["content"]);
}

TEST(ServeBenchCli, WorkloadFlagsAreRefusedByName) {
  const std::string url = " --base-url http://127.0.0.1:1";  // never contacted: the flags fail first
  const std::string ds = " --dataset " + sh_quote(fixture("sharegpt_small.json"));
  const std::string mt = url + " --workload multi-turn";
  const std::string sp = url + " --workload shared-prefix";
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {url + ds + " --workload multi", "error: --workload: unknown workload 'multi' (single, multi-turn or shared-prefix)"},
      {url + ds + " --turns 3", "error: --turns is only read by --workload multi-turn, not by --workload single"},
      {url + ds + " --think-time 1", "error: --think-time is only read by --workload multi-turn"},
      {url + ds + " --shared-prefix-tokens 32", "error: --shared-prefix-tokens is only read by --workload shared-prefix"},
      {sp + " --num-conversations 2", "error: --num-conversations is only read by --workload multi-turn"},
      {mt + " --shared-prefix-tokens 32", "not by --workload multi-turn"},
      {mt + " --num-prompts 5", "error: --num-prompts is only read by --workload single and shared-prefix"},
      {sp + " --trace-time-scale 2", "error: --trace-time-scale is only read by --workload single"},
      {mt + " --trace-token-scale 2", "error: --trace-token-scale is only read by --workload single"},
      {mt + " --turns 0", "error: --turns must be >= 1, got 0"},
      {mt + " --turns -2", "error: --turns must be >= 1, got -2"},
      {mt + " --num-conversations 0", "error: --num-conversations must be >= 1, got 0"},
      {mt + " --think-time -1", "error: --think-time must be >= 0 seconds"},
      {sp + " --shared-prefix-tokens 0", "error: --shared-prefix-tokens must be >= 1, got 0"},
      {sp + " --shared-prefix-tokens 600 --max-model-len 512",
       "error: --shared-prefix-tokens 600 leaves no room for a question and its answer in --max-model-len 512"},
      {sp + " --shared-prefix-tokens 512 --max-model-len 512", "leaves no room"},
      {mt + " --dataset " + sh_quote(fixture("trace_small.csv")), "takes its messages from a ShareGPT JSON file, not a trace"},
      {sp + ds + " --dataset-format trace", "not a trace"},
      {url, "error: --dataset is required with --workload single"},
  };
  for (const Case& c : cases) {
    auto r = run_command(bench(c.args));
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_CONTAINS(r.output, c.message) << c.args;
  }
}

TEST(ServeBenchCli, SharedPrefixLongerThanTheServersContextIsRefused) {
  FakeServerConfig cfg = fast();
  cfg.max_model_len = 100;
  FakeOpenAiServer server(cfg);
  auto r = run_command(bench("--base-url " + server.url() +
                             " --workload shared-prefix --shared-prefix-tokens 90 --default-output-len 16"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "error: --shared-prefix-tokens 90 + a question + an answer of 16 tokens "
                            "(--default-output-len) do not fit the max model length 100 (the server)");
  EXPECT_EQ(server.requests(), 0);
  auto mt = run_command(bench("--base-url " + server.url() + " --workload multi-turn --default-output-len 90"));
  EXPECT_EQ(mt.exit_code, 2) << mt.output;
  EXPECT_CONTAINS(mt.output, "--default-output-len 90 do not fit the max model length 100 (the server)");
  EXPECT_EQ(server.requests(), 0);
}
