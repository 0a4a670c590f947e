// The hardening probes' findings on the HTTP front end, each a regression test named after it:
// slow clients (slowloris) do not starve /health or completions, the whole-head
// deadline, the per-client connection cap, keep-alive and pipelining through the gate,
// a POST without Content-Length answered at once, byte-length rejection before
// tokenizing, rejected requests counted by the rate limiter, and `param` on engine
// errors, and the gate's counters on /metrics. Against FakeService (tests/serve/fake_service.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "moe/serve/http_server.h"
#include "moe/serve/request_guard.h"
#include "serve/fake_service.h"

namespace moe::serve {
namespace {

using nlohmann::json;
using testing::FakeService;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A raw TCP connection to 127.0.0.1:port, from `source` (another loopback address makes
// another client).
class Raw {
 public:
  Raw(int port, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    if (source != nullptr) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &src.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) return;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Raw() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  bool send(const std::string& s) { return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()); }
  // Reads until `needle` appears, the peer closes, or `limit` passes.
  std::string read_until(const std::string& needle, double limit = 5, bool* closed = nullptr) {
    std::string got;
    const auto deadline = Clock::now() + std::chrono::duration<double>(limit);
    timeval tv{0, 20000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (closed) *closed = false;
    while ((needle.empty() || got.find(needle) == std::string::npos) && Clock::now() < deadline) {
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        if (closed) *closed = true;
        break;
      }
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

class HttpHardeningTest : public ::testing::Test {
 protected:
  void start(ServerOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.served_model_name = "fake";
    server_ = std::make_unique<HttpServer>(service_, std::move(o));
    Status st = server_->start();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  std::unique_ptr<httplib::Client> client() {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    c->set_read_timeout(10, 0);
    c->set_connection_timeout(5, 0);
    return c;
  }
  httplib::Result completion(const json& body, const httplib::Headers& headers = {}) {
    return client()->Post("/v1/completions", headers, body.dump(), "application/json");
  }
  static json error_of(const httplib::Result& r) {
    EXPECT_TRUE(r);
    if (!r) return json();
    json j = json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.contains("error")) << r->body;
    return j.contains("error") ? j["error"] : json();
  }

  FakeService service_{256};
  std::unique_ptr<HttpServer> server_;
};

// Raises the soft fd limit to the hard one; returns how many fds may be open.
size_t fd_budget() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return static_cast<size_t>(rl.rlim_cur);
}

// ~2,100 sockets trickling request heads used to block the server (one worker each,
// per-read timeouts). With 64 workers at most, many times as many slow sockets: /health
// and a completion are answered within 1 s, before and after the sockets trickle more.
TEST_F(HttpHardeningTest, SlowlorisDoesNotStarveHealth) {
  ServerOptions o;
  o.max_threads = 64;
  o.max_connections_per_client = 0;  // the gate alone (the cap has its own test)
  o.header_timeout_seconds = 60;
  start(o);
  // Each slow socket costs two fds in this process (client and server side).
  const size_t n = std::min<size_t>(1500, (fd_budget() - 200) / 2);
  ASSERT_GE(n, 300u) << "fd limit too low for the test";
  std::vector<std::unique_ptr<Raw>> slow;
  for (size_t i = 0; i < n; ++i) {
    slow.push_back(std::make_unique<Raw>(server_->port()));
    ASSERT_TRUE(slow.back()->ok()) << i;
    ASSERT_TRUE(slow.back()->send("GET /health HTTP/1.1\r\nHost: x\r\n"));
  }
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto t0 = Clock::now();
    auto h = client()->Get("/health");
    ASSERT_TRUE(h) << httplib::to_string(h.error());
    EXPECT_EQ(h->status, 200);
    EXPECT_LT(seconds_since(t0), 1.0);
    t0 = Clock::now();
    auto c = completion({{"model", "fake"}, {"prompt", "hi"}, {"max_tokens", 2}});
    ASSERT_TRUE(c) << httplib::to_string(c.error());
    EXPECT_EQ(c->status, 200) << c->body;
    EXPECT_LT(seconds_since(t0), 1.0);
    for (auto& s : slow) s->send("X-Slow: 1\r\n");  // still no end of head
  }
  slow.clear();
}

// The head deadline is for the whole head, not per read: a client sending a byte every
// 100 ms is still closed header_timeout after it connected.
TEST_F(HttpHardeningTest, HeaderDeadlineIsForTheWholeHead) {
  ServerOptions o;
  o.header_timeout_seconds = 0.6;
  start(o);
  Raw slow(server_->port());
  ASSERT_TRUE(slow.ok());
  const auto t0 = Clock::now();
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Trickle: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  bool closed = false;
  for (size_t i = 0; i < head.size() && !closed; ++i) {
    slow.send(head.substr(i, 1));
    slow.read_until("", 0.1, &closed);
  }
  EXPECT_TRUE(closed);
  const double t = seconds_since(t0);
  EXPECT_GE(t, 0.5);
  EXPECT_LT(t, 2.5);
  // A whole head in time is served.
  Raw quick(server_->port());
  ASSERT_TRUE(quick.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(quick.read_until("ok").find("200 OK"), std::string::npos);
}

TEST_F(HttpHardeningTest, PerClientConnectionCapRefusesExtra) {
  ServerOptions o;
  o.max_connections_per_client = 4;
  start(o);
  std::vector<std::unique_ptr<Raw>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<Raw>(server_->port()));
    ASSERT_TRUE(held.back()->ok());
  }
  ASSERT_TRUE(held[0]->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));  // served, stays open
  EXPECT_NE(held[0]->read_until("ok").find("200 OK"), std::string::npos);
  Raw fifth(server_->port());
  ASSERT_TRUE(fifth.ok());
  bool closed = false;
  const std::string refused = fifth.read_until("", 3, &closed);
  EXPECT_NE(refused.find("429 Too Many Requests"), std::string::npos) << refused;
  EXPECT_NE(refused.find("too_many_connections"), std::string::npos) << refused;
  EXPECT_TRUE(closed);
  // Another client address is not affected.
  Raw other(server_->port(), "127.0.0.2");
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(other.read_until("ok").find("200 OK"), std::string::npos);
  // A closed connection gives its place back.
  held.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Raw again(server_->port());
  ASSERT_TRUE(again.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(again.read_until("ok").find("200 OK"), std::string::npos);
}

TEST_F(HttpHardeningTest, KeepAliveAndPipeliningThroughTheGate) {
  start();
  Raw c(server_->port());
  ASSERT_TRUE(c.ok());
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int i = 0; i < 3; ++i) {  // one connection, one request after another
    ASSERT_TRUE(c.send(get));
    EXPECT_NE(c.read_until("\"ok\"}").find("200 OK"), std::string::npos) << i;
  }
  ASSERT_TRUE(c.send(get + get + get));  // three at once
  std::string got;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  size_t answers = 0;
  while (answers < 3 && Clock::now() < deadline) {
    got += c.read_until("\"ok\"}", 1);
    answers = 0;
    for (size_t pos = got.find("200 OK"); pos != std::string::npos; pos = got.find("200 OK", pos + 1)) ++answers;
  }
  EXPECT_EQ(answers, 3u) << got;
}

// The gate's counters on /metrics: with a cap of 2 per client, 2 slow heads closed at the
// head deadline, a 3rd connection refused, and a kept-alive connection closed when idle;
// every count is the number of connections this test made of that kind.
TEST_F(HttpHardeningTest, GateCountersOnMetrics) {
  ServerOptions o;
  o.max_connections_per_client = 2;
  o.header_timeout_seconds = 0.4;
  o.keep_alive_timeout_seconds = 1;
  start(o);
  auto metric = [](const std::string& text, const std::string& series) -> double {
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  };
  {
    Raw a(server_->port()), b(server_->port());
    ASSERT_TRUE(a.send("GET /health HTTP/1.1\r\n"));
    ASSERT_TRUE(b.send("GET /health HTTP/1.1\r\n"));
    Raw third(server_->port());  // the client's 3rd: refused
    EXPECT_NE(third.read_until("", 3).find("429"), std::string::npos);
    bool closed_a = false, closed_b = false;
    a.read_until("", 3, &closed_a);  // the head deadline closes both
    b.read_until("", 3, &closed_b);
    EXPECT_TRUE(closed_a && closed_b);
  }
  {
    Raw kept(server_->port());  // served, then idle: closed after the keep-alive timeout
    ASSERT_TRUE(kept.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
    bool closed = false;
    EXPECT_NE(kept.read_until("", 4, &closed).find("200 OK"), std::string::npos);
    EXPECT_TRUE(closed);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the gate's count of the close
  auto r = client()->Get("/metrics");
  ASSERT_TRUE(r);
  const std::string& m = r->body;
  EXPECT_EQ(metric(m, "moe:http_connections_refused_total{reason=\"per_client_cap\"}"), 1) << m;
  EXPECT_EQ(metric(m, "moe:http_connections_closed_total{reason=\"header_timeout\"}"), 2) << m;
  EXPECT_EQ(metric(m, "moe:http_connections_closed_total{reason=\"keep_alive_idle\"}"), 1) << m;
  EXPECT_EQ(metric(m, "moe:http_connections_admitted_total"), 4) << m;  // a, b, kept, this one
  EXPECT_EQ(metric(m, "moe:http_connections_waiting"), 0) << m;
}

// A POST with no body and no Content-Length used to wait 10 s (the read timeout)
// for its 400; it has an empty body (RFC 9112) and is answered at once.
TEST_F(HttpHardeningTest, PostWithoutContentLengthAnsweredAtOnce) {
  start();
  Raw c(server_->port());
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string got = c.read_until("}}");
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_NE(got.find("400 Bad Request"), std::string::npos) << got;
  EXPECT_NE(got.find("invalid_request_error"), std::string::npos) << got;
  Raw d(server_->port());
  ASSERT_TRUE(d.send("DELETE /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(d.read_until("}}").find("405 Method Not Allowed"), std::string::npos);
  EXPECT_LT(seconds_since(t0), 2.0);
}

// A 1 MB prompt used to be tokenized (1-2 s, 140 MB) before the context check.
TEST_F(HttpHardeningTest, ByteLengthRejectedBeforeTokenizing) {
  ServerOptions o;
  o.max_body_bytes = 2 << 20;
  start(o);
  // FakeService: 256 tokens of context, the longest token "<999>" is 5 bytes:
  // 256 * 5 * 2 + 1024 bytes at most.
  const size_t bound = prompt_byte_bound(256, 5);
  ASSERT_EQ(bound, 3584u);
  const int calls_before = service_.count_tokens_calls;
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = path == "/v1/chat/completions";
    const std::string prompt(1 << 20, 'a');
    json body = {{"model", "fake"}, {"max_tokens", 1}};
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", prompt}}};
    } else {
      body["prompt"] = prompt;
    }
    auto r = client()->Post(path.c_str(), body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    const json e = error_of(r);
    EXPECT_EQ(e["param"], chat ? "messages" : "prompt");
    EXPECT_EQ(e["code"], "context_length_exceeded");
    EXPECT_NE(e["message"].get<std::string>().find("3584 bytes"), std::string::npos) << e;
  }
  EXPECT_EQ(service_.count_tokens_calls, calls_before);  // never tokenized
  EXPECT_EQ(service_.submitted(), 0);
  // Just under the bound: tokenized, and the engine's own context check answers.
  auto r = completion({{"model", "fake"}, {"prompt", std::string(bound, 'a')}, {"max_tokens", 1}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(error_of(r)["param"], "prompt");
  EXPECT_GT(service_.count_tokens_calls, calls_before);
}

// Invalid requests used not to count against the rate limit.
TEST_F(HttpHardeningTest, RejectedRequestsCountAgainstRateLimit) {
  ServerOptions o;
  o.rate_limits.requests_per_second = 1;
  double now = 0;
  std::mutex mu;
  o.rate_limit_clock = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return now;
  };
  start(o);
  auto bad = client()->Post("/v1/completions", "{not json", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  // The bucket (1 request) was spent by the invalid request: both are refused now.
  auto bad2 = client()->Post("/v1/completions", "{not json", "application/json");
  ASSERT_TRUE(bad2);
  EXPECT_EQ(bad2->status, 429);
  EXPECT_EQ(bad2->get_header_value("Retry-After"), "1");
  auto good = completion({{"model", "fake"}, {"prompt", "a"}, {"max_tokens", 1}});
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 429);
  {
    std::lock_guard<std::mutex> lock(mu);
    now = 1.0;
  }
  good = completion({{"model", "fake"}, {"prompt", "a"}, {"max_tokens", 1}});
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200);
}

// Errors about the context used to carry "param": null.
TEST_F(HttpHardeningTest, EngineErrorsCarryParam) {
  start();
  // Within the byte bound, over the 256-token context: the service's InvalidArgument.
  auto r = completion({{"model", "fake"}, {"prompt", std::string(250, 'p')}, {"max_tokens", 10}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(error_of(r)["param"], "prompt");
  auto chat = client()->Post(
      "/v1/chat/completions",
      json({{"model", "fake"}, {"max_tokens", 10}, {"messages", {{{"role", "user"}, {"content", std::string(250, 'p')}}}}})
          .dump(),
      "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 400);
  EXPECT_EQ(error_of(chat)["param"], "messages");
}

// The engine's messages (request_validation.cc, scheduler.cc), word for word.
TEST(RequestGuardTest, ParamOfEngineErrors) {
  const std::string ctx =
      "this model's maximum context length is 2048 tokens, but 2100 were requested: prompt (2000 tokens) + "
      "max_tokens (100) exceeds the context of 2048 tokens";
  EXPECT_EQ(param_of_engine_error(ctx, Endpoint::kCompletions), "prompt");
  EXPECT_EQ(param_of_engine_error(ctx, Endpoint::kChatCompletions), "messages");
  EXPECT_TRUE(is_context_length_error(ctx));
  const std::string kv = "the request needs 5000 tokens of KV cache, more than the 4096 tokens the pool holds";
  EXPECT_EQ(param_of_engine_error(kv, Endpoint::kCompletions), "prompt");
  EXPECT_TRUE(is_context_length_error(kv));
  EXPECT_EQ(param_of_engine_error("top_p must be in (0, 1] (got 0)", Endpoint::kCompletions), "top_p");
  EXPECT_EQ(param_of_engine_error("top_k must be >= 0 (got -1)", Endpoint::kCompletions), "top_k");
  EXPECT_EQ(param_of_engine_error("logprobs must be in [-1, 20] (got 21)", Endpoint::kCompletions), "logprobs");
  EXPECT_EQ(param_of_engine_error("prompt_logprobs must be in [-1, 20] (got 21)", Endpoint::kCompletions),
            "prompt_logprobs");
  EXPECT_EQ(param_of_engine_error("logit_bias for token 5 must be in [-100, 100] (got 200)", Endpoint::kCompletions),
            "logit_bias");
  EXPECT_EQ(param_of_engine_error("stop_token_ids[1] = 99999 is outside the vocabulary [0, 32000)",
                                  Endpoint::kCompletions),
            "stop_token_ids");
  EXPECT_EQ(param_of_engine_error("at most 4 stop strings (got 5)", Endpoint::kCompletions), "stop");
  EXPECT_EQ(param_of_engine_error("prompt is empty", Endpoint::kCompletions), "prompt");
  EXPECT_EQ(param_of_engine_error("prompt token id 7 at position 0 is outside the vocabulary [0, 5)",
                                  Endpoint::kChatCompletions),
            "messages");
  EXPECT_EQ(param_of_engine_error("the server is shutting down", Endpoint::kCompletions), "");
  EXPECT_FALSE(is_context_length_error("top_p must be in (0, 1]"));
  EXPECT_EQ(prompt_byte_bound(2048, 16), 2048u * 16 * 2 + 1024);
  EXPECT_EQ(prompt_byte_bound(2048, 0), 0u);
}

}  // namespace
}  // namespace moe::serve
