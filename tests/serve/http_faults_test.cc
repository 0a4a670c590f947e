// The HTTP front end when the engine fails (FakeService): a non-streamed request that
// ends in an engine error or is cut by a stopping server gets an OpenAI error JSON with
// status 503 (decided at the end: never a 200 with an empty or cut body); a streamed one
// gets an SSE error event and then [DONE]; /health reports the engine's state
// (GenerationService::health()) with 503, and "shutting_down" while draining.
#include <future>
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
using Clock = std::chrono::steady_clock;

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(3000)) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

class HttpFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
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
    return c;
  }
  httplib::Result completion(const json& body) {
    return client()->Post("/v1/completions", body.dump(), "application/json");
  }
  // The status and parsed body of GET /health.
  std::pair<int, json> health() {
    auto r = client()->Get("/health");
    EXPECT_TRUE(r);
    if (!r) return {0, json()};
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  static void expect_503_json(const httplib::Result& r, const std::string& needle) {
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 503) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    EXPECT_EQ(j["error"]["type"], "service_unavailable") << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << r->body;
  }

  FakeService service_{256};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpFaultsTest, NonStreamedEngineErrorIs503Json) {
  auto r = completion({{"model", "fake"}, {"prompt", "FAIL here"}, {"max_tokens", 5}});
  expect_503_json(r, "generation failed: injected failure");
  // A healthy request still answers 200 with the whole JSON.
  auto ok = completion({{"model", "fake"}, {"prompt", "abc"}, {"max_tokens", 3}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["text"], "abc");
}

TEST_F(HttpFaultsTest, StreamedEngineErrorIsErrorEventThenDone) {
  auto r = completion({{"model", "fake"}, {"prompt", "FAIL here"}, {"max_tokens", 5}, {"stream", true}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);  // sent with the first chunk, before the failure
  const std::string& body = r->body;
  const size_t done = body.rfind("data: [DONE]\n\n");
  ASSERT_NE(done, std::string::npos) << body;
  EXPECT_EQ(done + 14, body.size()) << body;
  const size_t err = body.rfind("data: {\"error\"");
  ASSERT_NE(err, std::string::npos) << body;
  const json e = json::parse(body.substr(err + 6, done - err - 8));
  EXPECT_EQ(e["error"]["type"], "service_unavailable");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("injected failure"), std::string::npos);
}

TEST_F(HttpFaultsTest, StopAnswersAWaitingNonStreamedRequestWith503) {
  service_.set_hold(true);
  auto inflight = std::async(std::launch::async, [&] {
    return completion({{"model", "fake"}, {"prompt", "abc"}, {"max_tokens", 3}});
  });
  ASSERT_TRUE(eventually([&] { return service_.in_flight() == 1; }));
  server_->stop();
  expect_503_json(inflight.get(), "the server stopped before the request finished");
  EXPECT_EQ(service_.cancelled().size(), 1u);
  service_.set_hold(false);
}

TEST_F(HttpFaultsTest, HealthReportsTheEngineState) {
  auto [status, body] = health();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, json({{"status", "ok"}}));

  service_.set_health({.state = "stalled", .detail = "an engine step has been running for 12.5 s"});
  std::tie(status, body) = health();
  EXPECT_EQ(status, 503);
  EXPECT_EQ(body, json({{"status", "stalled"}, {"detail", "an engine step has been running for 12.5 s"}}));

  service_.set_health({.state = "failed", .detail = "mpi broadcast: timed out"});
  std::tie(status, body) = health();
  EXPECT_EQ(status, 503);
  EXPECT_EQ(body, json({{"status", "failed"}, {"detail", "mpi broadcast: timed out"}}));

  // Degraded still serves (a load balancer keeps it): 200, with the reason.
  service_.set_health({.state = "degraded", .detail = "3 (layer, expert) pair(s) ... re-replicated"});
  std::tie(status, body) = health();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, json({{"status", "degraded"}, {"detail", "3 (layer, expert) pair(s) ... re-replicated"}}));

  service_.set_health({.state = "recovering", .detail = "relaunching the worker group"});
  std::tie(status, body) = health();
  EXPECT_EQ(status, 503);
  EXPECT_EQ(body["status"], "recovering");

  // Draining: "shutting_down" unless the engine itself is not ok.
  service_.set_health({});
  server_->drain();
  std::tie(status, body) = health();
  EXPECT_EQ(status, 503);
  EXPECT_EQ(body, json({{"status", "shutting_down"}}));
  service_.set_health({.state = "failed", .detail = "x"});
  std::tie(status, body) = health();
  EXPECT_EQ(status, 503);
  EXPECT_EQ(body["status"], "failed");
}

}  // namespace
}  // namespace moe::serve
