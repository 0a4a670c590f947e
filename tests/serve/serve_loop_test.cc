// The serving lifecycle (serve_loop.h) against FakeService and a stub engine loop: the
// first SIGTERM drains (/health 503) and shuts the engine down with the grace period, a
// second one with grace 0; the server stops when the loop returns; a start failure runs
// nothing; an engine error is returned and still stops the server.
#include "moe/serve/serve_loop.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "serve/fake_service.h"

namespace moe::serve {
namespace {

using testing::FakeService;

// An engine loop that blocks until released, recording the shutdown calls.
struct StubEngine {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<double> graces;
  bool released = false;
  int runs = 0;
  Status result = ok_status();

  ServedEngine served() {
    return {[this] {
              std::unique_lock<std::mutex> lock(mu);
              ++runs;
              cv.wait(lock, [this] { return released; });
              return result;
            },
            [this](double grace) {
              std::lock_guard<std::mutex> lock(mu);
              graces.push_back(grace);
              cv.notify_all();
            }};
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }
  // Waits (up to 5 s) until `n` shutdown calls arrived.
  bool wait_shutdowns(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return graces.size() >= n; });
  }
};

int health(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  auto r = c.Get("/health");
  return r ? r->status : -1;
}

ServerOptions local_options() {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.served_model_name = "fake";
  return o;
}

TEST(ServeLoop, FirstSignalDrainsWithGraceSecondAbortsThenTheServerStops) {
  FakeService service;
  HttpServer server(service, local_options());
  StubEngine engine;
  std::promise<int> started;
  ServeLoopOptions options;
  options.shutdown_grace_seconds = 7;
  options.on_started = [&](const HttpServer& s) { started.set_value(s.port()); };
  auto loop = std::async(std::launch::async, [&] { return serve_until_shutdown(server, engine.served(), options); });
  const int port = started.get_future().get();
  EXPECT_EQ(health(port), 200);

  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  ASSERT_TRUE(engine.wait_shutdowns(1));
  EXPECT_EQ(engine.graces, std::vector<double>{7});
  EXPECT_EQ(health(port), 503);  // draining while requests finish

  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  ASSERT_TRUE(engine.wait_shutdowns(2));
  EXPECT_EQ(engine.graces, (std::vector<double>{7, 0}));

  engine.release();
  const ServeLoopResult r = loop.get();
  EXPECT_TRUE(r.start.ok()) << r.start.to_string();
  EXPECT_TRUE(r.run.ok()) << r.run.to_string();
  EXPECT_EQ(engine.runs, 1);
  EXPECT_EQ(health(port), -1);  // stopped: nothing listens
}

TEST(ServeLoop, StartFailureRunsNothing) {
  FakeService service;
  ServerOptions o = local_options();
  o.host = "203.0.113.7";  // TEST-NET-3: no address of this machine
  HttpServer server(service, o);
  StubEngine engine;
  bool started = false;
  ServeLoopOptions options;
  options.on_started = [&](const HttpServer&) { started = true; };
  const ServeLoopResult r = serve_until_shutdown(server, engine.served(), options);
  EXPECT_FALSE(r.start.ok());
  EXPECT_FALSE(started);
  EXPECT_EQ(engine.runs, 0);
}

TEST(ServeLoop, EngineErrorIsReturnedAndTheServerStops) {
  FakeService service;
  HttpServer server(service, local_options());
  StubEngine engine;
  engine.result = Status(StatusCode::kDeadlineExceeded, "broadcast: rank 1 did not answer");
  engine.release();  // run() returns at once with the error
  int port = 0;
  ServeLoopOptions options;
  options.on_started = [&](const HttpServer& s) { port = s.port(); };
  const ServeLoopResult r = serve_until_shutdown(server, engine.served(), options);
  EXPECT_TRUE(r.start.ok());
  EXPECT_EQ(r.run.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.run.message(), "broadcast: rank 1 did not answer");
  ASSERT_GT(port, 0);
  EXPECT_EQ(health(port), -1);
}

}  // namespace
}  // namespace moe::serve
