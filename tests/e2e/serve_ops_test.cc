// `moe serve` on the shipped model, plain and supervised (--supervise --ep 1: the
// tokenizer and the timings cross the worker protocol): /tokenize agrees with the
// prompt_tokens the engine counts for the same text and detokenize gives the text
// back; /metrics' vllm: families move by exactly what the requests imply (token sums,
// tokens per step = prompt tokens + decode steps); a CORS preflight is answered; the
// flags are documented in --help.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "e2e/serve_process.h"
#include "serve/metrics_text.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using serve::testing::parse_exposition;
using testing::ServeProcess;

class ServeOpsTest : public ::testing::TestWithParam<bool> {};

json post_json(httplib::Client& c, const std::string& path, const json& body, int expect_status = 200) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r) << path;
  if (!r) return json();
  EXPECT_EQ(r->status, expect_status) << path << ": " << r->body;
  return json::parse(r->body, nullptr, false);
}

TEST_P(ServeOpsTest, TokenizeDetokenizeMetricsAndCors) {
  const bool supervised = GetParam();
  std::vector<std::string> args = {"--threads", "1", "--allowed-origins", "http://ui.example", "--liveness-timeout", "2"};
  if (supervised) args.insert(args.end(), {"--supervise", "--startup-timeout", "60"});
  ServeProcess server(args);
  ASSERT_GT(server.port(), 0) << server.log();
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60, 0);

  const std::vector<std::pair<std::string, int>> requests = {{"ROMEO: What light through yonder window", 5},
                                                             {"JULIET:\nO Romeo, Romeo", 3}};
  double prompt_sum = 0, gen_sum = 0;
  for (const auto& [prompt, max_tokens] : requests) {
    const json tok = post_json(c, "/tokenize", {{"prompt", prompt}, {"return_token_strs", true}});
    const std::vector<int> ids = tok["tokens"].get<std::vector<int>>();
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(tok["count"], ids.size());
    EXPECT_EQ(tok["max_model_len"], 512) << tok;  // the shipped model's context (config.json)
    EXPECT_EQ(ids[0], 1);  // BOS (<s>), added by default
    const json bare = post_json(c, "/tokenize", {{"prompt", prompt}, {"add_special_tokens", false}});
    EXPECT_EQ(bare["tokens"].get<std::vector<int>>(), std::vector<int>(ids.begin() + 1, ids.end()));
    // The token strings spell the text (SentencePiece: one leading space on the first piece).
    std::string spelled;
    for (const json& s : tok["token_strs"]) spelled += s.get<std::string>();
    EXPECT_EQ(spelled, " " + prompt);
    EXPECT_EQ(post_json(c, "/detokenize", {{"tokens", ids}})["prompt"], prompt);
    // The engine counts the same prompt tokens.
    const json done = post_json(c, "/v1/completions", {{"prompt", prompt}, {"max_tokens", max_tokens},
                                                       {"temperature", 0}, {"ignore_eos", true}});
    EXPECT_EQ(done["usage"]["prompt_tokens"], ids.size()) << done;
    EXPECT_EQ(done["usage"]["completion_tokens"], max_tokens) << done;
    prompt_sum += static_cast<double>(ids.size());
    gen_sum += max_tokens;
  }
  post_json(c, "/detokenize", {{"tokens", {1, 2048}}}, 400);  // the vocabulary is 2048

  const std::map<std::string, std::string> model{{"model_name", "tiny-mixtral-shakespeare"}};
  const double n = static_cast<double>(requests.size());
  // A reply can reach the client before the step that produced its last token is in the
  // engine's counters (and, supervised, before the worker's counters reach the front end):
  // scrape until the token counters are complete, for up to 10 s.
  std::string body;
  for (int i = 0; i < 200; ++i) {
    auto scraped = c.Get("/metrics");
    ASSERT_TRUE(scraped && scraped->status == 200);
    body = scraped->body;
    const auto now = parse_exposition(body);
    if (now.value("vllm:generation_tokens_total", model) >= gen_sum &&
        now.value("vllm:iteration_tokens_total_sum", model) >= prompt_sum + gen_sum - n &&
        now.value("vllm:iteration_tokens_total_count", model) == now.value("moe:engine_steps_total")) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto m = parse_exposition(body);
  EXPECT_EQ(m.value("vllm:request_success_total", {{"model_name", "tiny-mixtral-shakespeare"},
                                                   {"finished_reason", "length"}}), n);
  EXPECT_EQ(m.value("vllm:request_prompt_tokens_sum", model), prompt_sum);
  EXPECT_EQ(m.value("vllm:request_generation_tokens_sum", model), gen_sum);
  EXPECT_EQ(m.value("vllm:prompt_tokens_total", model), prompt_sum);
  EXPECT_EQ(m.value("vllm:generation_tokens_total", model), gen_sum);
  // Each request: one step feeds its prompt (and samples the first token), then one
  // step per further token feeds the previous one.
  EXPECT_EQ(m.value("vllm:iteration_tokens_total_sum", model), prompt_sum + gen_sum - n);
  EXPECT_EQ(m.value("vllm:iteration_tokens_total_count", model), m.value("moe:engine_steps_total"));
  for (const char* h : {"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
                        "vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds"}) {
    EXPECT_EQ(m.value(std::string(h) + "_count", model), n) << h;
  }
  // The engine's timings came through: decoding 2 and 4 further tokens takes time, and
  // inference = prefill + decode.
  EXPECT_GT(m.value("vllm:request_decode_time_seconds_sum", model), 0);
  EXPECT_GT(m.value("vllm:request_prefill_time_seconds_sum", model), 0);
  EXPECT_NEAR(m.value("vllm:request_inference_time_seconds_sum", model),
              m.value("vllm:request_prefill_time_seconds_sum", model) +
                  m.value("vllm:request_decode_time_seconds_sum", model),
              1e-9);
  EXPECT_LE(m.value("vllm:request_decode_time_seconds_sum", model), m.value("vllm:e2e_request_latency_seconds_sum", model));
  EXPECT_EQ(m.value("vllm:num_preemptions_total", model), 0);

  auto pre = c.Options("/v1/completions", {{"Origin", "http://ui.example"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://ui.example");
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

INSTANTIATE_TEST_SUITE_P(PlainAndSupervised, ServeOpsTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Supervised" : "Plain"; });

TEST(ServeOpsHelp, CorsFlagsAreDocumented) {
  auto r = testing::run_command(testing::moe_binary() + " serve --help");
  for (const char* flag : {"--allowed-origins", "--allowed-methods", "--allowed-headers", "--allowed-credentials"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  }
  r = testing::run_command(testing::moe_binary() + " serve --model " + testing::tiny_model_dir() +
                           " --allowed-methods 'PO ST' --allowed-origins http://a.example");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--allowed-methods"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace moe
