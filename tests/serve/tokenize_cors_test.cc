// POST /tokenize and /detokenize (vLLM's fields, errors naming the field, auth) and CORS
// (off by default; preflight allowed / disallowed; headers on actual responses) against
// FakeService, whose tokens are bytes (fake_service.h): every expected id is the byte's
// value, computed here independently.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "moe/serve/cors.h"
#include "moe/serve/http_server.h"
#include "serve/fake_service.h"

namespace moe::serve {
namespace {

using nlohmann::json;
using testing::FakeService;

class TokenizeCorsTest : public ::testing::Test {
 protected:
  void start(ServerOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.served_model_name = "fake";
    server_ = std::make_unique<HttpServer>(service_, std::move(o));
    Status st = server_->start();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  httplib::Result post(const std::string& path, const std::string& body, const httplib::Headers& h = {}) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    return c.Post(path.c_str(), h, body, "application/json");
  }
  httplib::Result options(const std::string& path, const httplib::Headers& h) {
    httplib::Client c("127.0.0.1", server_->port());
    return c.Options(path.c_str(), h);
  }
  // 4xx with an OpenAI error naming `param` (empty: null).
  static void expect_error(const httplib::Result& r, int status, const std::string& param) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_EQ(j["error"]["param"], param.empty() ? json(nullptr) : json(param)) << r->body;
  }
  static std::vector<int> bytes_of(const std::string& s) {
    std::vector<int> ids;
    for (unsigned char c : s) ids.push_back(c);
    return ids;
  }
  FakeService service_{256};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(TokenizeCorsTest, TokenizePromptWithAndWithoutSpecialTokens) {
  start();
  auto r = post("/tokenize", R"({"model":"fake","prompt":"Hi you"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  std::vector<int> want = {1};
  for (int id : bytes_of("Hi you")) want.push_back(id);
  EXPECT_EQ(j["tokens"].get<std::vector<int>>(), want);
  EXPECT_EQ(j["count"], 7);
  EXPECT_EQ(j["max_model_len"], 256);
  EXPECT_FALSE(j.contains("token_strs"));

  r = post("/tokenize", R"({"prompt":"Hi","add_special_tokens":false,"return_token_strs":true})");
  ASSERT_EQ(r->status, 200) << r->body;
  j = json::parse(r->body);
  EXPECT_EQ(j["tokens"].get<std::vector<int>>(), bytes_of("Hi"));
  EXPECT_EQ(j["token_strs"], json({"H", "i"}));
  EXPECT_EQ(j["count"], 2);
}

TEST_F(TokenizeCorsTest, TokenizeMessagesGoesThroughTheChatTemplate) {
  ServerOptions o;
  auto chatml = ChatTemplate::builtin("chatml");
  ASSERT_TRUE(chatml.ok());
  o.chat_template = chatml.value();
  start(std::move(o));
  auto r = post("/tokenize", R"({"messages":[{"role":"user","content":"hey"}]})");
  ASSERT_EQ(r->status, 200) << r->body;
  // chatml by hand; a chat adds no special tokens by default (vLLM).
  const std::string prompt = "<|im_start|>user\nhey<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(json::parse(r->body)["tokens"].get<std::vector<int>>(), bytes_of(prompt));
  r = post("/tokenize", R"({"messages":[{"role":"user","content":"hey"}],"add_special_tokens":true})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["count"], static_cast<int>(prompt.size()) + 1);
}

TEST_F(TokenizeCorsTest, TokenizeErrorsNameTheField) {
  start();
  expect_error(post("/tokenize", "[1]"), 400, "");
  expect_error(post("/tokenize", "{}"), 400, "prompt");
  expect_error(post("/tokenize", R"({"prompt":"a","messages":[{"role":"user","content":"b"}]})"), 400, "messages");
  expect_error(post("/tokenize", R"({"prompt":5})"), 400, "prompt");
  expect_error(post("/tokenize", R"({"prompt":"a","add_special_tokens":"yes"})"), 400, "add_special_tokens");
  expect_error(post("/tokenize", R"({"prompt":"a","return_token_strs":1})"), 400, "return_token_strs");
  expect_error(post("/tokenize", R"({"messages":[{"role":"wizard","content":"b"}]})"), 400, "messages[0].role");
  expect_error(post("/tokenize", R"({"messages":[{"role":"user","content":"b"}],"add_generation_prompt":false})"), 400,
               "add_generation_prompt");
  expect_error(post("/tokenize", R"({"model":"other","prompt":"a"})"), 404, "model");
  expect_error(post("/tokenize", R"({"model":7,"prompt":"a"})"), 400, "model");
}

TEST_F(TokenizeCorsTest, DetokenizeAndItsErrors) {
  start();
  auto r = post("/detokenize", json({{"model", "fake"}, {"tokens", {1, 'o', 'k', 2}}}).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body), json({{"prompt", "ok"}}));  // BOS/EOS dropped
  r = post("/detokenize", R"({"tokens":[]})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["prompt"], "");
  expect_error(post("/detokenize", "{}"), 400, "tokens");
  expect_error(post("/detokenize", R"({"tokens":"abc"})"), 400, "tokens");
  expect_error(post("/detokenize", R"({"tokens":[1,"a"]})"), 400, "tokens");
  expect_error(post("/detokenize", R"({"tokens":[1,2.5]})"), 400, "tokens");
  auto out = post("/detokenize", R"({"tokens":[65,1000]})");
  expect_error(out, 400, "tokens");
  EXPECT_NE(out->body.find("1000"), std::string::npos) << out->body;
  expect_error(post("/detokenize", R"({"tokens":[-1]})"), 400, "tokens");
  expect_error(post("/detokenize", R"({"model":"x","tokens":[1]})"), 404, "model");
  // Another method: 405.
  httplib::Client c("127.0.0.1", server_->port());
  auto g = c.Get("/detokenize");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 405);
}

TEST_F(TokenizeCorsTest, TokenizerEndpointsNeedTheApiKey) {
  ServerOptions o;
  o.api_keys = {"sesame"};
  start(std::move(o));
  expect_error(post("/tokenize", R"({"prompt":"a"})"), 401, "");
  expect_error(post("/detokenize", R"({"tokens":[65]})", {{"Authorization", "Bearer wrong"}}), 401, "");
  auto r = post("/tokenize", R"({"prompt":"a"})", {{"Authorization", "Bearer sesame"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  r = post("/detokenize", R"({"tokens":[65]})", {{"Authorization", "Bearer sesame"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["prompt"], "A");
}

TEST_F(TokenizeCorsTest, CorsIsOffByDefault) {
  start();
  auto p = options("/v1/completions", {{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 405);
  EXPECT_FALSE(p->has_header("Access-Control-Allow-Origin"));
  auto r = post("/tokenize", R"({"prompt":"a"})", {{"Origin", "https://app.example"}});
  ASSERT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST_F(TokenizeCorsTest, PreflightFromAnAllowedOriginGets204) {
  ServerOptions o;
  o.cors.allowed_origins = {"https://app.example", "http://localhost:3000"};
  o.cors.allowed_methods = {"GET", "POST"};
  o.cors.allowed_headers = {"Authorization", "Content-Type"};
  start(std::move(o));
  auto p = options("/v1/chat/completions", {{"Origin", "http://localhost:3000"},
                                            {"Access-Control-Request-Method", "POST"},
                                            {"Access-Control-Request-Headers", "content-type, authorization"}});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 204) << p->body;
  EXPECT_EQ(p->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(p->get_header_value("Access-Control-Allow-Methods"), "GET, POST");
  EXPECT_EQ(p->get_header_value("Access-Control-Allow-Headers"), "Authorization, Content-Type");
  EXPECT_EQ(p->get_header_value("Access-Control-Max-Age"), "600");
  EXPECT_EQ(p->get_header_value("Vary"), "Origin");
  EXPECT_FALSE(p->has_header("Access-Control-Allow-Credentials"));

  // A disallowed origin, method or header: 400 and no CORS headers.
  for (const httplib::Headers& h :
       {httplib::Headers{{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}},
        httplib::Headers{{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "DELETE"}},
        httplib::Headers{{"Origin", "https://app.example"},
                         {"Access-Control-Request-Method", "POST"},
                         {"Access-Control-Request-Headers", "X-Secret"}}}) {
    auto bad = options("/v1/completions", h);
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << bad->body;
    EXPECT_FALSE(bad->has_header("Access-Control-Allow-Origin"));
    EXPECT_FALSE(bad->has_header("Access-Control-Allow-Methods"));
  }
  // Actual responses: the allowed origin echoed (with Vary), on errors and streams too;
  // nothing for another origin or without Origin.
  auto r = post("/v1/completions", R"({"prompt":"ab","max_tokens":2})", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(r->get_header_value("Vary"), "Origin");
  r = post("/v1/completions", R"({"prompt":"ab","max_tokens":2,"stream":true})", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  r = post("/v1/completions", R"({"prompt":5})", {{"Origin", "https://app.example"}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  r = post("/v1/completions", R"({"prompt":"ab","max_tokens":2})", {{"Origin", "https://evil.example"}});
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  r = post("/v1/completions", R"({"prompt":"ab","max_tokens":2})");
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  // A plain OPTIONS (not a preflight) is still 405.
  auto plain = options("/v1/completions", {});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 405);
}

TEST_F(TokenizeCorsTest, WildcardOriginAndCredentials) {
  ServerOptions o;
  o.cors.allowed_origins = {"*"};
  start(std::move(o));
  auto p = options("/tokenize", {{"Origin", "https://any.example"},
                                 {"Access-Control-Request-Method", "POST"},
                                 {"Access-Control-Request-Headers", "X-Custom"}});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 204);
  EXPECT_EQ(p->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(p->get_header_value("Access-Control-Allow-Methods"), "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  EXPECT_EQ(p->get_header_value("Access-Control-Allow-Headers"), "X-Custom");  // "*": the asked ones
  auto r = post("/tokenize", R"({"prompt":"a"})", {{"Origin", "https://any.example"}});
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");

  CorsOptions c;
  c.allowed_origins = {"*"};
  c.allow_credentials = true;
  auto policy = CorsPolicy::create(c);
  ASSERT_TRUE(policy.ok());
  const HeaderList h = policy->response_headers("https://x.example");
  EXPECT_EQ(h, (HeaderList{{"Access-Control-Allow-Origin", "https://x.example"},
                           {"Vary", "Origin"},
                           {"Access-Control-Allow-Credentials", "true"}}));
}

TEST(CorsPolicyTest, BadListsAreRefusedByFlagAndListsSplit) {
  EXPECT_EQ(split_comma_list({"a, b", "c", " ", ",d,"}), (std::vector<std::string>{"a", "b", "c", "d"}));
  CorsOptions c;
  c.allowed_origins = {"https://a.example"};
  c.allowed_methods = {"PO ST"};
  auto bad = CorsPolicy::create(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--allowed-methods"), std::string::npos);
  c.allowed_methods = {"*"};
  c.allowed_origins = {""};
  bad = CorsPolicy::create(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--allowed-origins"), std::string::npos);
  EXPECT_FALSE(CorsPolicy().enabled());
}

}  // namespace
}  // namespace moe::serve
