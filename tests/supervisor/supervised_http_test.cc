// The OpenAI front end (serve::HttpServer) over a SupervisedService with in-process fake
// worker groups: a streamed completion survives the group's death mid-stream with the
// same text and one [DONE]; /health says "recovering" (503) while the group is down and
// lists the worker pids; /metrics counts failures, recoveries and recovery time.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "moe/serve/http_server.h"
#include "moe/supervisor/supervised_service.h"
#include "supervisor/fake_worker.h"

namespace moe::supervisor {
namespace {

using nlohmann::json;
using testing::expected_token;
using testing::FakeLauncher;
using testing::token_text;

template <typename Pred>
bool eventually(Pred pred, double seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

class SupervisedHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SupervisorOptions o;
    o.liveness_timeout_seconds = 1;
    o.probe_interval_seconds = 0.05;
    o.recovery_timeout_seconds = 10;
    o.startup_timeout_seconds = 5;
    auto s = SupervisedService::start(launcher_, o);
    ASSERT_TRUE(s.ok()) << s.status().message();
    service_ = std::move(s).value();
    serve::ServerOptions so;
    so.port = 0;
    server_ = std::make_unique<serve::HttpServer>(*service_, so);
    ASSERT_TRUE(server_->start().ok());
  }
  void TearDown() override {
    server_.reset();
    service_.reset();
  }
  httplib::Client client() { return httplib::Client("127.0.0.1", server_->port()); }

  FakeLauncher launcher_{3};
  std::unique_ptr<SupervisedService> service_;
  std::unique_ptr<serve::HttpServer> server_;
};

TEST_F(SupervisedHttpTest, StreamedCompletionSurvivesTheGroupsDeath) {
  std::atomic<int> chunks{0};
  auto streamed = std::async(std::launch::async, [&] {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_read_timeout(30, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers = {{"Content-Type", "application/json"}};
    req.body = json({{"model", "fake"}, {"prompt", "ROMEO:"}, {"max_tokens", 60}, {"temperature", 0}, {"stream", true}}).dump();
    std::string body;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      body.append(data, n);
      ++chunks;
      return true;
    };
    auto res = cli.send(req);
    return std::make_pair(res ? res->status : -1, body);
  });
  ASSERT_TRUE(eventually([&] { return chunks >= 5; }));
  launcher_.group(0)->crash();
  auto [status, body] = streamed.get();
  EXPECT_EQ(status, 200);
  std::string text, finish;
  int done = 0;
  size_t pos = 0, end;
  while ((end = body.find("\n\n", pos)) != std::string::npos) {
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
    const std::string payload = event.substr(6);
    if (payload == "[DONE]") {
      ++done;
      continue;
    }
    json j = json::parse(payload);
    ASSERT_FALSE(j.contains("error")) << payload;
    text += j["choices"][0]["text"].get<std::string>();
    if (j["choices"][0]["finish_reason"].is_string()) finish = j["choices"][0]["finish_reason"];
  }
  std::string want;
  for (int i = 0; i < 60; ++i) want += token_text(expected_token("ROMEO:", 0, i));
  EXPECT_EQ(text, want);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(done, 1);

  httplib::Client cli = client();
  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("moe:worker_failures_total 1\n"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("moe:recoveries_total 1\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("moe:replayed_requests_total 1\n"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("moe:recovery_seconds_count 1\n"), std::string::npos);
  // A second scrape does not count the same recovery again.
  EXPECT_NE(cli.Get("/metrics")->body.find("moe:recovery_seconds_count 1\n"), std::string::npos);
}

TEST_F(SupervisedHttpTest, HealthListsWorkerPidsAndSaysRecoveringWhileDown) {
  httplib::Client cli = client();
  auto ok = cli.Get("/health");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(json::parse(ok->body), json({{"status", "ok"}, {"worker_pids", {::getpid(), 4242}}}));
  launcher_.block_launches = true;
  launcher_.group(0)->crash();
  ASSERT_TRUE(eventually([&] { return service_->health().state == "recovering"; }));
  auto down = cli.Get("/health");
  ASSERT_TRUE(down);
  EXPECT_EQ(down->status, 503);
  json j = json::parse(down->body);
  EXPECT_EQ(j["status"], "recovering");
  EXPECT_NE(j["detail"].get<std::string>().find("the worker group failed"), std::string::npos);
  launcher_.block_launches = false;
  ASSERT_TRUE(eventually([&] {
    auto r = cli.Get("/health");
    return r && r->status == 200;
  }));
}

}  // namespace
}  // namespace moe::supervisor
