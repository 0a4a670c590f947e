// The HTTP front end against FakeService: routes, every bad-input case, SSE format,
// auth, rate limits, client disconnects, idle connections, shutdown.
#include "moe/serve/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <regex>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "serve/fake_service.h"

namespace moe::serve {
namespace {

using nlohmann::json;
using testing::FakeService;
using Clock = std::chrono::steady_clock;

// A plain TCP connection to the server (for idle connections and abrupt closes).
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  void send(const std::string& s) { ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), (ssize_t)s.size()); }
  // Reads until `needle` appears (or 5 s pass); returns what was read.
  std::string read_until(const std::string& needle) {
    std::string got;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    timeval tv{0, 100000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (got.find(needle) == std::string::npos && Clock::now() < deadline) {
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) break;
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string post_request(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The payloads of an SSE body ("data: X\n\n" ...); fails unless it ends with [DONE].
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event in " << body;
    if (end == std::string::npos) break;
    const std::string event = body.substr(pos, end - pos);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    out.push_back(event.substr(6));
    pos = end + 2;
  }
  EXPECT_FALSE(out.empty());
  if (!out.empty()) {
    EXPECT_EQ(out.back(), "[DONE]");
  }
  return out;
}

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(3000)) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

class HttpServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    if (o.served_model_name.empty()) o.served_model_name = "fake";
    server_ = std::make_unique<HttpServer>(service_, std::move(o));
    Status st = server_->start();
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_GT(server_->port(), 0);
  }
  std::unique_ptr<httplib::Client> client() {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    c->set_read_timeout(10, 0);
    c->set_connection_timeout(5, 0);
    return c;
  }
  httplib::Result post(const std::string& path, const std::string& body, const httplib::Headers& headers = {}) {
    return client()->Post(path.c_str(), headers, body, "application/json");
  }
  httplib::Result completion(const json& body, const httplib::Headers& headers = {}) {
    return post("/v1/completions", body.dump(), headers);
  }
  // An OpenAI error JSON with this status (and param, unless "*").
  void expect_error(const httplib::Result& r, int status, const std::string& param = "*") {
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_TRUE(j["error"].contains("code"));
    if (param != "*") {
      EXPECT_EQ(j["error"]["param"], param.empty() ? json(nullptr) : json(param)) << r->body;
    }
  }
  void expect_alive() {
    auto r = client()->Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, R"({"status":"ok"})");
  }

  FakeService service_{256};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, Completion) {
  start();
  auto r = completion({{"model", "fake"}, {"prompt", "hello"}, {"max_tokens", 3}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fake");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["text"], "hel");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"], json::parse(R"({"prompt_tokens":6,"completion_tokens":3,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":0}})"));
  // The request reached the service as OpenAI's defaults say.
  const SeqRequest seen = service_.last_request();
  EXPECT_EQ(seen.prompt, "hello");
  EXPECT_FLOAT_EQ(seen.sampling.temperature, 1.0f);

  auto stop = completion({{"model", "fake"}, {"prompt", "hi"}, {"max_tokens", 10}, {"temperature", 0}});
  ASSERT_TRUE(stop);
  json s = json::parse(stop->body);
  EXPECT_EQ(s["choices"][0]["text"], "hi");
  EXPECT_EQ(s["choices"][0]["finish_reason"], "stop");

  auto ids = completion({{"model", "fake"}, {"prompt", {5, 6}}, {"max_tokens", 2}});
  ASSERT_TRUE(ids);
  EXPECT_EQ(json::parse(ids->body)["choices"][0]["text"], "5 6 ");
}

TEST_F(HttpServerTest, ChatCompletionFillsMaxTokensFromContext) {
  start();
  auto r = post("/v1/chat/completions", R"({"model":"fake","messages":[{"role":"user","content":"abc"}]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"], json::parse(R"({"role":"assistant","content":"abc"})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(service_.last_request().prompt, "abc");  // plain template
  EXPECT_EQ(service_.last_request().max_tokens, 256 - 4);
}

TEST_F(HttpServerTest, StreamedCompletionSse) {
  start();
  auto r = completion({{"model", "fake"}, {"prompt", "abcd"}, {"max_tokens", 3}, {"stream", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  auto payloads = sse_payloads(r->body);
  ASSERT_GE(payloads.size(), 3u);
  std::string text, id;
  for (size_t i = 0; i + 1 < payloads.size(); ++i) {
    json c = json::parse(payloads[i]);
    EXPECT_EQ(c["object"], "text_completion");
    if (id.empty()) id = c["id"];
    EXPECT_EQ(c["id"], id);
    EXPECT_FALSE(c.contains("usage"));
    text += c["choices"][0]["text"].get<std::string>();
    const bool last = i + 2 == payloads.size();
    EXPECT_EQ(c["choices"][0]["finish_reason"], last ? json("length") : json(nullptr)) << payloads[i];
  }
  EXPECT_EQ(text, "abc");
}

TEST_F(HttpServerTest, StreamedChatWithUsage) {
  start();
  auto r = post("/v1/chat/completions",
                R"({"model":"fake","messages":[{"role":"user","content":"xy"}],"max_tokens":8,"stream":true,
                    "stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  auto payloads = sse_payloads(r->body);
  // role chunk, "x", "y", finish chunk, usage chunk, [DONE]
  ASSERT_EQ(payloads.size(), 6u) << r->body;
  json role = json::parse(payloads[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"], json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_EQ(json::parse(payloads[1])["choices"][0]["delta"]["content"], "x");
  EXPECT_EQ(json::parse(payloads[2])["choices"][0]["delta"]["content"], "y");
  json fin = json::parse(payloads[3]);
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(json::parse(payloads[i])["usage"].is_null());
  json usage = json::parse(payloads[4]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], json::parse(R"({"prompt_tokens":3,"completion_tokens":3,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":0}})"));
}

TEST_F(HttpServerTest, BadInputGetsErrorJsonAndServerStaysUp) {
  ServerOptions o;
  o.max_body_bytes = 4096;
  o.max_tokens_limit = 50;
  start(o);
  // A slow stream in flight the whole time: it must come out intact.
  service_.step_delay_ms = 5;
  const std::string long_prompt(40, 'z');
  auto inflight = std::async(std::launch::async, [&] {
    return completion({{"model", "fake"}, {"prompt", long_prompt}, {"max_tokens", 40}, {"stream", true}});
  });
  ASSERT_TRUE(eventually([&] { return service_.in_flight() == 1; }));

  expect_error(post("/v1/completions", "{not json"), 400, "");
  expect_error(post("/v1/completions", R"({"model":"fake","prompt":"x",})"), 400, "");
  expect_error(post("/v1/completions", ""), 400, "");
  expect_error(post("/v1/completions", "[]"), 400, "");
  expect_error(post("/v1/completions", R"({"model":"fake","prompt":12})"), 400, "prompt");
  expect_error(post("/v1/completions", R"({"model":"fake","prompt":"x","max_tokens":"9"})"), 400, "max_tokens");
  expect_error(post("/v1/completions", R"({"model":"fake","prompt":"x","stream":1})"), 400, "stream");
  expect_error(post("/v1/completions", R"({"model":"fake","prompt":"x","temperature":[1]})"), 400, "temperature");
  expect_error(post("/v1/completions", R"({"model":"fake","prompt":"x","max_tokens":0})"), 400, "max_tokens");
  expect_error(post("/v1/completions", R"({"model":"fake","prompt":"x","max_tokens":-1})"), 400, "max_tokens");
  expect_error(post("/v1/completions", R"({"model":"fake","prompt":"x","max_tokens":51})"), 400, "max_tokens");
  expect_error(post("/v1/completions", R"({"model":"fake","prompt":"x","n":17})"), 400, "n");  // over --max-n (16)
  auto unknown_model = post("/v1/completions", R"({"model":"gpt-4o","prompt":"x"})");
  expect_error(unknown_model, 404, "model");
  EXPECT_EQ(json::parse(unknown_model->body)["error"]["code"], "model_not_found");
  expect_error(post("/v1/chat/completions", R"({"model":"fake","messages":[]})"), 400, "messages");
  expect_error(post("/v1/chat/completions", R"({"model":"fake","messages":[{"role":"user","content":7}]})"), 400,
               "messages[0].content");
  expect_error(post("/v1/chat/completions", R"({"model":"fake"})"), 400, "messages");
  expect_error(post("/v1/completions", "{\"model\":\"fake\",\"prompt\":\"bad \xc3\x28 utf8\"}"), 400, "");
  expect_error(post("/v1/completions", "{\"model\":\"fake\",\"prompt\":\"\xff\"}"), 400, "");
  // Prompt + max_tokens beyond the context: submit() says InvalidArgument -> 400.
  auto too_long = completion({{"model", "fake"}, {"prompt", std::string(250, 'p')}, {"max_tokens", 10}});
  expect_error(too_long, 400);
  EXPECT_NE(json::parse(too_long->body)["error"]["message"].get<std::string>().find("context"), std::string::npos);
  // Body over the limit (Content-Length, and chunked).
  const std::string big = R"({"model":"fake","prompt":")" + std::string(5000, 'a') + R"("})";
  expect_error(post("/v1/completions", big), 413);
  {
    auto c = client();
    auto r = c->Post(
        "/v1/completions",
        [&](size_t offset, httplib::DataSink& sink) {
          if (offset < big.size()) {
            sink.write(big.data() + offset, std::min<size_t>(1000, big.size() - offset));
          } else {
            sink.done();
          }
          return true;
        },
        "application/json");
    expect_error(r, 413);
  }
  // Unknown path: 404; wrong method: 405 with Allow.
  expect_error(client()->Get("/v1/nothing"), 404);
  expect_error(post("/v2/completions", "{}"), 404);
  auto wrong = client()->Get("/v1/completions");
  expect_error(wrong, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "POST");
  auto wrong2 = post("/health", "{}");
  expect_error(wrong2, 405);
  EXPECT_EQ(wrong2->get_header_value("Allow"), "GET, HEAD");
  expect_error(client()->Delete("/v1/chat/completions"), 405);
  expect_alive();

  auto streamed = inflight.get();
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200);
  std::string text;
  auto payloads = sse_payloads(streamed->body);
  for (size_t i = 0; i + 1 < payloads.size(); ++i) text += json::parse(payloads[i])["choices"][0]["text"];
  EXPECT_EQ(text, long_prompt);
  EXPECT_TRUE(service_.cancelled().empty());
}

TEST_F(HttpServerTest, PrefixCacheUsageSaltsAndReset) {
  ServerOptions o;
  o.api_keys = {"k1", "k2"};
  start(o);
  service_.cached_tokens = 3;
  const json body = {{"model", "fake"}, {"prompt", "abcd"}, {"max_tokens", 2}, {"cache_salt", "s"}};
  const httplib::Headers k1 = {{"Authorization", "Bearer k1"}}, k2 = {{"Authorization", "Bearer k2"}};
  auto a = completion(body, k1);
  ASSERT_TRUE(a);
  ASSERT_EQ(a->status, 200) << a->body;
  EXPECT_EQ(json::parse(a->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  json streamed = body;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  auto s = completion(streamed, k1);
  ASSERT_TRUE(s);
  const auto payloads = sse_payloads(s->body);
  ASSERT_GE(payloads.size(), 2u);
  EXPECT_EQ(json::parse(payloads[payloads.size() - 2])["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  ASSERT_EQ(completion(body, k2)->status, 200);
  const std::vector<SeqRequest> reqs = service_.requests();
  ASSERT_EQ(reqs.size(), 3u);
  // One key's requests share a salt, another key's differ; each ends with the client's
  // salt and never holds the key itself.
  EXPECT_EQ(reqs[0].cache_salt, reqs[1].cache_salt);
  EXPECT_NE(reqs[0].cache_salt, reqs[2].cache_salt);
  for (const SeqRequest& r : reqs) {
    EXPECT_EQ(r.cache_salt.substr(r.cache_salt.size() - 2), "\ns") << r.cache_salt;
    EXPECT_EQ(r.cache_salt.find("k1"), std::string::npos);
    EXPECT_EQ(r.cache_salt.rfind("tenant:", 0), 0u) << r.cache_salt;
  }
  // POST /reset_prefix_cache: behind the key.
  auto denied = client()->Post("/reset_prefix_cache", "", "application/json");
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(service_.prefix_cache_resets.load(), 0);
  auto reset = client()->Post("/reset_prefix_cache", k2, "", "application/json");
  ASSERT_TRUE(reset);
  EXPECT_EQ(reset->status, 200);
  EXPECT_EQ(service_.prefix_cache_resets.load(), 1);
  expect_error(client()->Get("/reset_prefix_cache", k2), 405);
}

TEST_F(HttpServerTest, ApiKeys) {
  ServerOptions o;
  o.api_keys = {"key-one", "key-two"};
  start(o);
  const json body = {{"model", "fake"}, {"prompt", "a"}, {"max_tokens", 1}};
  auto none = completion(body);
  expect_error(none, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["type"], "authentication_error");
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer");
  expect_error(completion(body, {{"Authorization", "Bearer key-three"}}), 401);
  expect_error(completion(body, {{"Authorization", "Basic a2V5LW9uZQ=="}}), 401);
  expect_error(completion(body, {{"Authorization", "Bearer key-on"}}), 401);
  expect_error(client()->Get("/v1/models"), 401);
  auto ok = completion(body, {{"Authorization", "Bearer key-two"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  auto models = client()->Get("/v1/models", {{"Authorization", "bearer key-one"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "fake");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["max_model_len"], 256);
  expect_alive();  // no auth on /health and /metrics
  EXPECT_EQ(client()->Get("/metrics")->status, 200);
}

TEST_F(HttpServerTest, RateLimitAnswers429WithRetryAfter) {
  ServerOptions o;
  o.api_keys = {"k1", "k2"};
  o.rate_limits.requests_per_second = 1;
  o.rate_limits.tokens_per_minute = 100;
  double now = 0;
  std::mutex mu;
  o.rate_limit_clock = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return now;
  };
  start(o);
  const json small = {{"model", "fake"}, {"prompt", "a"}, {"max_tokens", 1}};
  const httplib::Headers k1 = {{"Authorization", "Bearer k1"}}, k2 = {{"Authorization", "Bearer k2"}};
  EXPECT_EQ(completion(small, k1)->status, 200);
  auto limited = completion(small, k1);
  expect_error(limited, 429);
  EXPECT_EQ(limited->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(limited->body)["error"]["type"], "rate_limit_error");
  EXPECT_EQ(completion(small, k2)->status, 200);  // another key has its own buckets
  {
    std::lock_guard<std::mutex> lock(mu);
    now = 1.0;
  }
  // Tokens: 100 per minute, k1 has used 3 (~98.7 left now); 2 + 99 = 101 is above the
  // bucket's capacity, so it waits for a full bucket (~0.8 s).
  auto tokens = completion({{"model", "fake"}, {"prompt", "a"}, {"max_tokens", 99}}, k1);
  expect_error(tokens, 429);
  EXPECT_EQ(tokens->get_header_value("Retry-After"), "1");
  EXPECT_EQ(completion(small, k1)->status, 200);
  expect_alive();
}

TEST_F(HttpServerTest, RateLimitWithoutKeysIsPerClientAddress) {
  ServerOptions o;
  o.rate_limits.requests_per_second = 0.01;
  start(o);
  const json small = {{"model", "fake"}, {"prompt", "a"}, {"max_tokens", 1}};
  EXPECT_EQ(completion(small)->status, 200);
  // A made-up bearer token does not buy a fresh bucket.
  auto limited = completion(small, {{"Authorization", "Bearer fresh"}});
  expect_error(limited, 429);
  EXPECT_EQ(limited->get_header_value("Retry-After"), "100");
}

TEST_F(HttpServerTest, ClientDisconnectCancelsStreamedRequest) {
  start();
  service_.set_hold(true);
  auto conn = std::make_unique<RawConnection>(server_->port());
  ASSERT_TRUE(conn->connected());
  conn->send(post_request("/v1/chat/completions",
                          R"({"model":"fake","messages":[{"role":"user","content":"abc"}],"stream":true})"));
  // The role chunk comes at once; then the client hangs up while the request waits.
  EXPECT_NE(conn->read_until("assistant").find("chat.completion.chunk"), std::string::npos);
  ASSERT_EQ(service_.in_flight(), 1);
  conn.reset();
  EXPECT_TRUE(eventually([&] { return service_.cancelled().size() == 1; }));
  EXPECT_TRUE(eventually([&] { return service_.in_flight() == 0; }));
  service_.set_hold(false);
  expect_alive();
}

TEST_F(HttpServerTest, ClientDisconnectCancelsNonStreamedRequest) {
  start();
  service_.set_hold(true);
  {
    RawConnection conn(server_->port());
    ASSERT_TRUE(conn.connected());
    conn.send(post_request("/v1/completions", R"({"model":"fake","prompt":"abc","max_tokens":2})"));
    // Nothing is sent before the request ends (its status is decided then).
    ASSERT_TRUE(eventually([&] { return service_.in_flight() == 1; }));
  }
  EXPECT_TRUE(eventually([&] { return service_.cancelled().size() == 1; }));
  service_.set_hold(false);
  expect_alive();
}

TEST_F(HttpServerTest, ClientDisconnectCancelsNonStreamedRequestWhileTokensFlow) {
  start();
  service_.step_delay_ms = 10;  // 50 tokens: ~0.5 s unless cancelled
  {
    RawConnection conn(server_->port());
    ASSERT_TRUE(conn.connected());
    conn.send(post_request("/v1/completions",
                           R"({"model":"fake","prompt":")" + std::string(60, 'w') + R"(","max_tokens":50})"));
    ASSERT_TRUE(eventually([&] { return service_.submitted() == 1; }));
  }
  EXPECT_TRUE(eventually([&] { return service_.cancelled().size() == 1; }, std::chrono::milliseconds(300)));
}

TEST_F(HttpServerTest, EngineErrorEndsResponses) {
  start();
  auto streamed = completion({{"model", "fake"}, {"prompt", "FAIL now"}, {"max_tokens", 5}, {"stream", true}});
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  auto payloads = sse_payloads(streamed->body);
  ASSERT_EQ(payloads.size(), 3u);  // "F", the error event, [DONE]
  json err = json::parse(payloads[1]);
  EXPECT_NE(err["error"]["message"].get<std::string>().find("injected failure"), std::string::npos);
  EXPECT_EQ(err["error"]["type"], "service_unavailable");
  // Non-streamed: the status is decided at the end: 503 with an OpenAI error JSON.
  auto plain = completion({{"model", "fake"}, {"prompt", "FAIL now"}, {"max_tokens", 5}});
  expect_error(plain, 503);
  EXPECT_NE(json::parse(plain->body)["error"]["message"].get<std::string>().find("injected failure"),
            std::string::npos);
  EXPECT_EQ(json::parse(plain->body)["error"]["type"], "service_unavailable");
  expect_alive();
}

TEST_F(HttpServerTest, UnavailableServiceIs503) {
  start();
  service_.shutdown(std::chrono::milliseconds(0));
  expect_error(completion({{"model", "fake"}, {"prompt", "a"}}), 503);
}

TEST_F(HttpServerTest, FiveHundredIdleConnectionsDoNotBlockService) {
  ServerOptions o;
  o.keep_alive_timeout_seconds = 30;  // idle connections would hold workers for the whole test
  start(o);
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 500; ++i) {
    idle.push_back(std::make_unique<RawConnection>(server_->port()));
    ASSERT_TRUE(idle.back()->connected()) << i;
  }
  const auto t0 = Clock::now();
  auto r = completion({{"model", "fake"}, {"prompt", "quick"}, {"max_tokens", 2}});
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  // Blocked workers would wait out the 30 s keep-alive; 5 s leaves room for a
  // sanitizer build on a busy 2-core machine (2.6 s seen in CI).
  EXPECT_LT(seconds, 5.0);
  idle.clear();
  expect_alive();
}

TEST_F(HttpServerTest, DrainThenStop) {
  start();
  service_.step_delay_ms = 5;
  auto inflight = std::async(std::launch::async, [&] {
    return completion({{"model", "fake"}, {"prompt", std::string(30, 'q')}, {"max_tokens", 30}, {"stream", true}});
  });
  ASSERT_TRUE(eventually([&] { return service_.in_flight() == 1; }));
  server_->drain();
  auto health = client()->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  expect_error(completion({{"model", "fake"}, {"prompt", "a"}}), 503);
  EXPECT_EQ(client()->Get("/metrics")->status, 200);
  auto r = inflight.get();  // the in-flight stream still completes
  ASSERT_TRUE(r);
  auto payloads = sse_payloads(r->body);
  EXPECT_EQ(json::parse(payloads[payloads.size() - 2])["choices"][0]["finish_reason"], "length");
  const int port = server_->port();
  server_->stop();
  RawConnection after(port);
  EXPECT_FALSE(after.connected());
}

TEST_F(HttpServerTest, StopEndsWaitingResponses) {
  start();
  service_.set_hold(true);
  auto inflight = std::async(std::launch::async, [&] {
    return completion({{"model", "fake"}, {"prompt", "abc"}, {"max_tokens", 3}, {"stream", true}});
  });
  ASSERT_TRUE(eventually([&] { return service_.in_flight() == 1; }));
  const auto t0 = Clock::now();
  server_->stop();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  auto r = inflight.get();
  ASSERT_TRUE(r);
  auto payloads = sse_payloads(r->body);
  ASSERT_EQ(payloads.size(), 2u);
  EXPECT_TRUE(json::parse(payloads[0]).contains("error"));
  EXPECT_EQ(service_.cancelled().size(), 1u);
  service_.set_hold(false);
}

TEST_F(HttpServerTest, MetricsEndpoint) {
  start();
  ASSERT_EQ(completion({{"model", "fake"}, {"prompt", "abc"}, {"max_tokens", 2}})->status, 200);
  ASSERT_EQ(completion({{"model", "fake"}, {"prompt", "abc"}, {"max_tokens", 2}, {"stream", true}})->status, 200);
  ASSERT_EQ(client()->Get("/nope")->status, 404);
  auto r = client()->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  // HTTP counts are taken after each response is written: wait for the last one.
  std::string t;
  eventually([&] {
    t = client()->Get("/metrics")->body;
    return t.find("status=\"404\"} 1") != std::string::npos;
  });
  for (const char* want : {"moe:http_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n",
                           "moe:http_requests_total{endpoint=\"other\",status=\"404\"} 1\n",
                           "moe:request_success_total{finished_reason=\"length\"} 2\n",
                           "moe:time_to_first_token_seconds_count 2\n", "moe:e2e_request_latency_seconds_count 2\n",
                           "moe:inter_token_latency_seconds_count 2\n", "moe:kv_cache_blocks_total 100\n",
                           "moe:expert_routed_tokens_total{expert=\"1\",layer=\"1\"} 8\n",
                           "# TYPE moe:time_to_first_token_seconds histogram\n"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want << "\nin\n" << t;
  }
}

TEST_F(HttpServerTest, StartFailsOnAPortInUse) {
  start();
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = server_->port();
  HttpServer second(service_, o);
  Status st = second.start();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(std::to_string(server_->port())), std::string::npos);
}

}  // namespace
}  // namespace moe::serve
