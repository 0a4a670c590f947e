// `moe serve` end to end on the shipped model: the official `openai` npm package and
// curl get the text `moe generate` gives greedily; 32 simultaneous streamed requests
// each get the text they get alone; SIGTERM shuts down cleanly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <regex>
#include <thread>

#include "serve_process.h"

namespace moe {
namespace {

using testing::ServeProcess;

constexpr int kMaxTokens = 24;

TEST(ServeHttp, OpenAiNpmClientGetsTheGenerateText) {
  const char* modules = std::getenv("MOE_NODE_MODULES");
  ASSERT_TRUE(modules != nullptr && *modules)
      << "MOE_NODE_MODULES is not set: ./scripts/test.sh installs the `openai` npm package and sets it "
         "(or: npm install --prefix DIR openai@4; MOE_NODE_MODULES=DIR/node_modules)";
  ServeProcess server({"--threads", "1"});
  ASSERT_GT(server.port(), 0) << server.log();
  const std::string prompt = "First Citizen:\nBefore we proceed any further, hear me speak.";
  const std::string expected = testing::generate_text(prompt, kMaxTokens);
  testing::CommandResult r = testing::run_command(
      std::string("NODE_PATH=") + modules + " node " + testing::source_dir() + "/tests/e2e/node/openai_client.cjs " +
      server.base_url() + " " + testing::sh_quote(prompt) + " " + std::to_string(kMaxTokens));
  ASSERT_EQ(r.exit_code, 0) << r.output << server.log();
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["model"], "tiny-mixtral-shakespeare");
  EXPECT_EQ(j["completion"], expected);
  EXPECT_EQ(j["chat"], expected);  // the base model's "plain" chat template: the user text as the prompt
  EXPECT_EQ(j["stream"], expected);
  EXPECT_EQ(j["chat_role"], "assistant");
  EXPECT_GT(j["stream_chunks"].get<int>(), 3);
  EXPECT_EQ(j["completion_usage"]["completion_tokens"].get<int>() + j["completion_usage"]["prompt_tokens"].get<int>(),
            j["completion_usage"]["total_tokens"].get<int>());
  EXPECT_EQ(j["stream_usage"]["completion_tokens"], j["completion_usage"]["completion_tokens"]);
  EXPECT_EQ(j["bad_request_status"], 400);
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

TEST(ServeHttp, CurlCompletionAndStream) {
  ServeProcess server({"--threads", "1"});
  ASSERT_GT(server.port(), 0) << server.log();
  const std::string prompt = "ROMEO:";
  const std::string expected = testing::generate_text(prompt, kMaxTokens);
  const std::string body = nlohmann::json{{"model", "tiny-mixtral-shakespeare"}, {"prompt", prompt},
                                          {"max_tokens", kMaxTokens}, {"temperature", 0}}.dump();
  auto r = testing::run_command("curl -s -S " + server.base_url() + "/v1/completions -H 'Content-Type: application/json' -d " +
                                testing::sh_quote(body));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], expected);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], kMaxTokens);

  auto streamed = nlohmann::json::parse(body);
  streamed["stream"] = true;
  r = testing::run_command("curl -s -S -N " + server.base_url() + "/v1/completions -H 'Content-Type: application/json' -d " +
                           testing::sh_quote(streamed.dump()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string text;
  size_t pos = 0;
  int events = 0;
  while ((pos = r.output.find("data: ", pos)) != std::string::npos) {
    const size_t end = r.output.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos) << "unterminated SSE event";
    const std::string payload = r.output.substr(pos + 6, end - pos - 6);
    pos = end + 2;
    ++events;
    if (payload == "[DONE]") {
      EXPECT_EQ(pos, r.output.size()) << "[DONE] must be the last event";
      continue;
    }
    const auto chunk = nlohmann::json::parse(payload);
    EXPECT_EQ(chunk["object"], "text_completion");
    if (!chunk["choices"].empty()) text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_GT(events, 3);
  EXPECT_EQ(text, expected);
  EXPECT_NE(r.output.find("data: [DONE]\n\n"), std::string::npos);

  r = testing::run_command("curl -s " + server.base_url() + "/health");
  EXPECT_NE(r.output.find("ok"), std::string::npos) << r.output;
  r = testing::run_command("curl -s " + server.base_url() + "/metrics");
  EXPECT_NE(r.output.find("moe:expert_routed_tokens_total{"), std::string::npos) << r.output.substr(0, 2000);
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

// 32 streamed requests at once: each gets the text it gets alone (batch-invariant
// kernels, the default of `moe serve`).
TEST(ServeHttp, ThirtyTwoConcurrentStreamsMatchAlone) {
  ServeProcess server({"--threads", "1", "--max-num-seqs", "32"});
  ASSERT_GT(server.port(), 0) << server.log();
  const auto prompts = testing::serve_prompts(32);
  std::vector<testing::Streamed> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    alone.push_back(testing::stream_completion("127.0.0.1", server.port(), prompts[i], 16 + static_cast<int>(i % 5) * 4));
    ASSERT_EQ(alone.back().status, 200);
  }
  std::vector<std::future<testing::Streamed>> futures;
  for (size_t i = 0; i < prompts.size(); ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      return testing::stream_completion("127.0.0.1", server.port(), prompts[i], 16 + static_cast<int>(i % 5) * 4);
    }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const testing::Streamed s = futures[i].get();
    EXPECT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text, alone[i].text) << prompts[i];
    EXPECT_EQ(s.finish_reason, alone[i].finish_reason);
  }
  // The greedy texts are not all the same (the requests really are independent).
  std::set<std::string> distinct;
  for (const auto& a : alone) distinct.insert(a.text);
  EXPECT_GT(distinct.size(), 8u);
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

// Bad requests against the real engine: an OpenAI-style error with the right status,
// the server stays up, and a stream in flight meanwhile gets exactly its lone text.
TEST(ServeHttp, BadRequestsGetErrorsAndDisturbNothing) {
  ServeProcess server({"--threads", "1", "--max-body-bytes", "4096", "--max-tokens-limit", "256"});
  ASSERT_GT(server.port(), 0) << server.log();
  const std::string prompt = "KING LEAR:\nBlow, winds, and crack your cheeks!";
  const std::string alone = testing::stream_completion("127.0.0.1", server.port(), prompt, 200, true).text;
  auto in_flight = std::async(std::launch::async, [&] {
    return testing::stream_completion("127.0.0.1", server.port(), prompt, 200, true);
  });
  httplib::Client cli("127.0.0.1", server.port());
  auto post = [&](const std::string& path, const std::string& body) {
    return cli.Post(path.c_str(), body, "application/json");
  };
  auto expect_error = [&](const httplib::Result& r, int status, const std::string& words) {
    ASSERT_TRUE(r) << words;
    EXPECT_EQ(r->status, status) << r->body;
    const auto j = nlohmann::json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(words), std::string::npos) << r->body;
  };
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += "and ";  // about 600 tokens
  expect_error(post("/v1/completions", nlohmann::json{{"prompt", long_prompt}, {"max_tokens", 100}}.dump()), 400,
               "maximum context length is 512");
  expect_error(post("/v1/completions", R"({"prompt":"x","max_tokens":0})"), 400, "max_tokens");
  expect_error(post("/v1/completions", R"({"prompt":"x","max_tokens":300})"), 400, "max_tokens");
  expect_error(post("/v1/completions", "{\"prompt\":\"\xff\xfe\"}"), 400, "UTF-8");
  expect_error(post("/v1/completions", R"({"prompt": "x",)"), 400, "");
  expect_error(post("/v1/completions", R"({"prompt": 3})"), 400, "prompt");
  expect_error(post("/v1/completions", R"({"model":"gpt-4","prompt":"x"})"), 404, "gpt-4");
  expect_error(post("/v1/chat/completions", R"({"messages":[]})"), 400, "messages");
  expect_error(post("/v1/completions", std::string(5000, ' ')), 413, "");
  expect_error(cli.Get("/v1/completions"), 405, "");
  expect_error(cli.Get("/v2/nothing"), 404, "");
  const testing::Streamed s = in_flight.get();
  EXPECT_EQ(s.text, alone);
  EXPECT_EQ(s.finish_reason, "length");
  auto ok = post("/v1/completions", R"({"prompt":"ROMEO:","max_tokens":8,"temperature":0})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

// A client that goes away mid-stream cancels its request: its KV blocks return to the
// pool (moe:kv_cache_blocks_used back to 0) and it ends with finish reason "abort".
TEST(ServeHttp, DisconnectCancelsAndFreesBlocks) {
  ServeProcess server({"--threads", "1"});
  ASSERT_GT(server.port(), 0) << server.log();
  auto metric = [&](const std::string& name) {
    httplib::Client cli("127.0.0.1", server.port());
    auto r = cli.Get("/metrics");
    if (!r) return -1.0;
    const std::regex re("\n" + name + " ([0-9.e+]+)");
    std::smatch m;
    return std::regex_search(r->body, m, re) ? std::stod(m[1].str()) : -1.0;
  };
  {
    httplib::Client cli("127.0.0.1", server.port());
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers = {{"Content-Type", "application/json"}};
    req.body = R"({"prompt":"ROMEO:","max_tokens":500,"ignore_eos":true,"stream":true})";
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 5; };  // then hang up
    cli.send(req);
    EXPECT_GE(chunks, 5);
  }
  double used = -1, aborted = -1;
  for (int i = 0; i < 200; ++i) {
    used = metric("moe:kv_cache_blocks_used");
    aborted = metric("moe:request_success_total\\{finished_reason=\"abort\"\\}");
    if (used == 0 && aborted == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(used, 0);
  EXPECT_EQ(aborted, 1);
  EXPECT_GT(metric("moe:kv_cache_blocks_total"), 0);
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

}  // namespace
}  // namespace moe
