// The HTTP server's n, prompt lists, echo and logprobs against FakeService (whose
// outputs echo their prompts and whose logprobs follow a formula: fake_service.h):
// choice order and indexes, usage, seeds, streaming interleaved choices, cancelling
// every choice when the client goes away, an error in one choice, and a failed
// submit of one sequence.
#include <chrono>
#include <map>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "moe/serve/http_server.h"
#include "serve/fake_service.h"

namespace moe::serve {
namespace {

using nlohmann::json;
using testing::FakeService;

template <typename Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

class HttpChoicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.served_model_name = "fake";
    o.max_n = 8;
    o.client_poll_ms = 10;
    server_ = std::make_unique<HttpServer>(service_, std::move(o));
    ASSERT_TRUE(server_->start().ok());
  }
  httplib::Result post(const std::string& path, const json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    return c.Post(path.c_str(), body.dump(), "application/json");
  }
  json ok(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return r->status == 200 && path.find("stream") == std::string::npos ? json::parse(r->body, nullptr, false)
                                                                        : json(r->body);
  }
  // The SSE payloads of a streamed response (all but [DONE], which must end it).
  static std::vector<json> sse(const std::string& body) {
    std::vector<json> out;
    size_t pos = 0;
    bool done = false;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n\n", pos);
      const std::string payload = body.substr(pos + 6, end - pos - 6);
      pos = end + 2;
      EXPECT_FALSE(done) << "event after [DONE]";
      if (payload == "[DONE]") {
        done = true;
      } else {
        out.push_back(json::parse(payload));
      }
    }
    EXPECT_TRUE(done) << body;
    return out;
  }

  FakeService service_{256};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpChoicesTest, NChoicesAreSeededSeedPlusIndex) {
  const json j = ok("/v1/completions", {{"prompt", "abc"}, {"n", 3}, {"seed", 40}, {"max_tokens", 2}});
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], "ab");
  }
  // Prompt "abc" = 4 tokens, counted once; 3 choices x 2 tokens.
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 4}, {"completion_tokens", 6}, {"total_tokens", 10}, {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  const std::vector<SeqRequest> seen = service_.requests();
  ASSERT_EQ(seen.size(), 3u);
  std::set<uint64_t> seeds;
  for (const SeqRequest& s : seen) seeds.insert(s.sampling.seed.value_or(0));
  EXPECT_EQ(seeds, (std::set<uint64_t>{40, 41, 42}));
}

TEST_F(HttpChoicesTest, PromptListTimesNIsPromptMajor) {
  const json j = ok("/v1/completions", {{"prompt", {"ab", "wxyz"}}, {"n", 2}, {"max_tokens", 3}, {"echo", true}});
  ASSERT_EQ(j["choices"].size(), 4u);
  const char* texts[] = {"abab", "abab", "wxyzwxy", "wxyzwxy"};  // echo + output (the fake repeats the prompt)
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], texts[i]) << i;
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3 + 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4 * 3);  // "ab" + EOS, and "wxy" cut by max_tokens: 3 each

  const json ids = ok("/v1/completions", {{"prompt", json::parse("[[65,66],[67]]")}, {"max_tokens", 1}, {"echo", true}});
  ASSERT_EQ(ids["choices"].size(), 2u);
  EXPECT_EQ(ids["choices"][0]["text"], "AB65 ");  // echo: the ids' text (token_bytes), then the fake's "<id> "
  EXPECT_EQ(ids["choices"][1]["text"], "C67 ");
}

TEST_F(HttpChoicesTest, ParametersReachTheEngine) {
  ok("/v1/chat/completions",
     {{"messages", json::parse(R"([{"role":"user","content":"hi"}])")}, {"presence_penalty", 0.5},
      {"frequency_penalty", 0.25}, {"repetition_penalty", 1.2}, {"min_p", 0.1}, {"logit_bias", {{"5", -100}}},
      {"stop_token_ids", json::parse("[7]")}, {"response_format", {{"type", "json_object"}}}, {"max_tokens", 2}});
  const SeqRequest s = service_.last_request();
  EXPECT_FLOAT_EQ(s.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.sampling.frequency_penalty, 0.25f);
  EXPECT_FLOAT_EQ(s.sampling.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(s.sampling.min_p, 0.1f);
  EXPECT_EQ(s.sampling.logit_bias, (std::vector<std::pair<int, float>>{{5, -100.0f}}));
  EXPECT_EQ(s.stop_token_ids, (std::vector<int>{7}));
  EXPECT_EQ(s.response_format, "json_object");
  EXPECT_EQ(s.logprobs, -1);
}

TEST_F(HttpChoicesTest, CompletionLogprobsWithEcho) {
  const json j = ok("/v1/completions", {{"prompt", "ab"}, {"max_tokens", 2}, {"logprobs", 1}, {"echo", true}});
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(j["choices"][0]["text"], "abab");
  // Prompt: BOS (special: ""), 'a', 'b'; then generated 'a' (-1/8), 'b' (-2/8). Top 1: 'A' at -0.25.
  EXPECT_EQ(lp["tokens"], json({"", "a", "b", "a", "b"}));
  EXPECT_EQ(lp["token_logprobs"], json::parse("[null, -1.0, -1.0, -0.125, -0.25]"));
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1], json({{"A", -0.25}, {"a", -1.0}}));
  EXPECT_EQ(lp["top_logprobs"][3], json({{"A", -0.25}, {"a", -0.125}}));
  EXPECT_EQ(lp["text_offset"], json({0, 0, 1, 2, 3}));
  EXPECT_EQ(service_.last_request().prompt_logprobs, 1);
}

TEST_F(HttpChoicesTest, ChatLogprobs) {
  const json j = ok("/v1/chat/completions", {{"messages", json::parse(R"([{"role":"user","content":"hi"}])")},
                                             {"logprobs", true}, {"top_logprobs", 2}, {"max_tokens", 1}});
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["token"], "h");
  EXPECT_EQ(content[0]["logprob"], -0.125);
  EXPECT_EQ(content[0]["bytes"], json({104}));
  EXPECT_EQ(content[0]["top_logprobs"],
            json::parse(R"([{"token":"A","logprob":-0.25,"bytes":[65]},{"token":"B","logprob":-0.5,"bytes":[66]}])"));
  EXPECT_EQ(service_.last_request().logprobs, 2);
  EXPECT_EQ(service_.last_request().prompt_logprobs, -1);
}

TEST_F(HttpChoicesTest, StreamedChoicesInterleaveAndEachComplete) {
  auto r = post("/v1/chat/completions", {{"messages", json::parse(R"([{"role":"user","content":"hello"}])")},
                                         {"n", 3}, {"stream", true}, {"max_tokens", 4}, {"logprobs", true},
                                         {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  std::map<int, std::string> text;
  std::map<int, int> finishes, roles, logprob_entries;
  json usage;
  for (const json& c : sse(r->body)) {
    if (c["choices"].empty()) {
      usage = c["usage"];
      continue;
    }
    const json& ch = c["choices"][0];
    const int i = ch["index"];
    if (ch["delta"].contains("role")) ++roles[i];
    if (ch["delta"].contains("content")) text[i] += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) ++finishes[i];
    if (!ch["logprobs"].is_null()) logprob_entries[i] += static_cast<int>(ch["logprobs"]["content"].size());
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(text[i], "hell") << i;
    EXPECT_EQ(roles[i], 1) << i;
    EXPECT_EQ(finishes[i], 1) << i;
    EXPECT_EQ(logprob_entries[i], 4) << i;
  }
  EXPECT_EQ(usage, json({{"prompt_tokens", 6}, {"completion_tokens", 12}, {"total_tokens", 18}, {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

TEST_F(HttpChoicesTest, ClientGoneCancelsEveryChoice) {
  service_.step_delay_ms = 5;
  httplib::Client c("127.0.0.1", server_->port());
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = json({{"prompt", std::string(200, 'x')}, {"n", 3}, {"max_tokens", 50}, {"stream", true}}).dump();
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 4; };
  c.send(req);
  EXPECT_TRUE(eventually([&] { return service_.cancelled().size() == 3 && service_.in_flight() == 0; }))
      << service_.cancelled().size() << " cancelled, " << service_.in_flight() << " in flight";
}

TEST_F(HttpChoicesTest, AnErrorInOneChoiceEndsTheStreamAndCancelsTheOthers) {
  service_.step_delay_ms = 5;
  auto r = post("/v1/completions", {{"prompt", {"FAIL now", std::string(100, 'y')}}, {"max_tokens", 50}, {"stream", true}});
  ASSERT_TRUE(r);
  const std::vector<json> events = sse(r->body);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().contains("error")) << r->body;
  EXPECT_NE(events.back()["error"]["message"].get<std::string>().find("injected failure"), std::string::npos);
  EXPECT_TRUE(eventually([&] { return service_.cancelled().size() == 1 && service_.in_flight() == 0; }));

  auto whole = post("/v1/completions", {{"prompt", {std::string(100, 'y'), "FAIL"}}, {"max_tokens", 50}});
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 503) << whole->body;
  EXPECT_TRUE(eventually([&] { return service_.in_flight() == 0; }));
}

TEST_F(HttpChoicesTest, ARefusedSequenceRefusesTheRequest) {
  // The second prompt does not fit the context: 400, and the first (queued) is cancelled.
  auto r = post("/v1/completions", {{"prompt", {"ok", std::string(300, 'z')}}, {"max_tokens", 5}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("exceeds the context"), std::string::npos) << r->body;
  EXPECT_EQ(service_.submitted(), 1);
  EXPECT_EQ(service_.cancelled().size(), 1u);
  EXPECT_TRUE(eventually([&] { return service_.in_flight() == 0; }));
  auto n = post("/v1/completions", {{"prompt", "x"}, {"n", 9}});
  ASSERT_TRUE(n);
  EXPECT_EQ(n->status, 400);
  EXPECT_EQ(json::parse(n->body)["error"]["param"], "n");
}

}  // namespace
}  // namespace moe::serve
