// `moe serve --supervise --ep 1` on the shipped model: kill -9 (or SIGSTOP) of the worker
// mid-stream costs the client nothing: the streamed text equals the fault-free run's,
// greedy and seeded, with one [DONE] and no error, and a non-streamed request in flight
// gets its fault-free text too; the metrics count the recovery.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <thread>

#include "serve_process.h"
#include "supervise_stream.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::ServeProcess;

const std::vector<std::string> kSupervised = {"--supervise",        "--threads",          "1",
                                              "--liveness-timeout", "1",                  "--recovery-timeout",
                                              "30",                 "--startup-timeout",  "60"};

json request(const std::string& prompt, int max_tokens, double temperature, int seed = -1) {
  json b = {{"model", "tiny-mixtral-shakespeare"}, {"prompt", prompt}, {"max_tokens", max_tokens},
            {"temperature", temperature}, {"ignore_eos", true}};
  if (seed >= 0) b["seed"] = seed;
  return b;
}

template <typename Pred>
bool eventually(Pred pred, double seconds = 30) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// Two streams in flight (greedy and seeded); `fault` hits the worker when the greedy one
// has its first chunk. Each must equal its fault-free run on the same server.
void expect_streams_survive(ServeProcess& server, int signal_number) {
  const int port = server.port();
  const json greedy = request("ROMEO:\nWhat light", 400, 0);
  const json seeded = request("JULIET:\nO Romeo", 400, 0.8, 7);
  const json plain = request("HAMLET:\nTo be", 400, 0);  // not streamed
  auto complete = [&] {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(120, 0);
    auto r = cli.Post("/v1/completions", plain.dump(), "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
  };
  const auto plain_ref = complete();
  ASSERT_EQ(plain_ref.first, 200) << plain_ref.second;
  const testing::SupervisedStream greedy_ref = testing::stream_request(port, greedy);
  const testing::SupervisedStream seeded_ref = testing::stream_request(port, seeded);
  ASSERT_EQ(greedy_ref.finish_reason, "length") << server.log();
  ASSERT_EQ(seeded_ref.finish_reason, "length");

  const std::vector<int64_t> pids = testing::worker_pids(port);
  ASSERT_EQ(pids.size(), 1u) << testing::health_json(port).dump();
  const double failures_before = testing::metric_value(port, "moe:worker_failures_total");
  std::atomic<bool> seeded_started{false};
  auto seeded_run = std::async(std::launch::async, [&] {
    return testing::stream_request(port, seeded, [&] { seeded_started = true; });
  });
  ASSERT_TRUE(eventually([&] { return seeded_started.load(); }));
  auto plain_run = std::async(std::launch::async, complete);
  const testing::SupervisedStream g = testing::stream_request(
      port, greedy, [&] { ::kill(static_cast<pid_t>(pids[0]), signal_number); });
  const testing::SupervisedStream s = seeded_run.get();
  const auto p = plain_run.get();
  EXPECT_EQ(p.first, 200) << p.second;
  EXPECT_EQ(json::parse(p.second)["choices"][0]["text"], json::parse(plain_ref.second)["choices"][0]["text"]);

  for (const auto* r : {&g, &s}) {
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->error, "");
    EXPECT_EQ(r->finish_reason, "length");
    EXPECT_EQ(r->done, 1);
  }
  EXPECT_EQ(g.text, greedy_ref.text);
  EXPECT_EQ(s.text, seeded_ref.text);
  // The fault landed while they were in flight (else this test proves nothing).
  EXPECT_EQ(testing::metric_value(port, "moe:worker_failures_total"), failures_before + 1) << server.log();
  EXPECT_GE(testing::metric_value(port, "moe:replayed_requests_total"), 1);
  EXPECT_GE(testing::metric_value(port, "moe:recovery_seconds_count"), 1);
  const std::vector<int64_t> after = testing::worker_pids(port);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0], pids[0]);
  if (signal_number == SIGSTOP) ::kill(static_cast<pid_t>(pids[0]), SIGKILL);  // already killed; harmless
}

TEST(Supervise, Kill9OfTheWorkerMidStreamIsInvisibleToClients) {
  ServeProcess server(kSupervised);
  ASSERT_GT(server.port(), 0) << server.log();
  expect_streams_survive(server, SIGKILL);
  EXPECT_NE(server.log().find("supervisor: worker group restarted: rank pids"), std::string::npos) << server.log();
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

TEST(Supervise, StoppedWorkerIsDeclaredFailedAndReplaced) {
  ServeProcess server(kSupervised);
  ASSERT_GT(server.port(), 0) << server.log();
  expect_streams_survive(server, SIGSTOP);  // silent for --liveness-timeout 1 s: killed, replaced
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

TEST(Supervise, HealthShowsWorkerPidsAndNonStreamedRequestsWork) {
  ServeProcess server(kSupervised);
  ASSERT_GT(server.port(), 0) << server.log();
  const json h = testing::health_json(server.port());
  EXPECT_EQ(h["status"], "ok") << h.dump();
  ASSERT_EQ(h["worker_pids"].size(), 1u);
  const std::string expected = testing::generate_text("ROMEO:", 16);
  httplib::Client cli("127.0.0.1", server.port());
  json body = {{"model", "tiny-mixtral-shakespeare"}, {"prompt", "ROMEO:"}, {"max_tokens", 16}, {"temperature", 0}};
  auto r = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], expected);
  body["max_tokens"] = 100000;  // the worker refuses it: a 400, not a retry
  auto bad = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_EQ(testing::metric_value(server.port(), "moe:worker_failures_total"), 0);
  EXPECT_EQ(server.terminate(), 0) << server.log();
  // The worker group went with the supervisor.
  EXPECT_TRUE(eventually([&] { return ::kill(static_cast<pid_t>(h["worker_pids"][0].get<int64_t>()), 0) != 0; }, 10));
}

TEST(Supervise, MeaninglessFlagCombinationsAreRefusedByName) {
  struct Case {
    std::string flags, message;
  };
  for (const Case& c : std::vector<Case>{
           {"--mpirun-arg=--oversubscribe", "--mpirun-arg needs --supervise"},
           {"--recovery-timeout 3", "--recovery-timeout needs --supervise"},
           {"--supervise --mpirun-arg=--oversubscribe", "--mpirun-arg has no effect with --ep 1"},
           {"--supervise --max-restarts 0", "--max-restarts must be >= 1"},
           {"--supervise --recovery-timeout 0", "--recovery-timeout must be a positive number"},
           {"--supervise --worker-endpoint /tmp/x", "--worker-endpoint is internal to --supervise"},
       }) {
    auto r = testing::run_command(testing::moe_binary() + " serve --port 0 " + c.flags + " 2>&1");
    EXPECT_EQ(r.exit_code, 1) << c.flags << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.flags << ": " << r.output;
  }
}

TEST(Supervise, WorkerThatCannotStartIsAClearError) {
  auto r = testing::run_command(testing::moe_binary() +
                                " serve --port 0 --supervise --model /nonexistent/model --startup-timeout 30 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: worker group: worker group 1 ended during start-up: exited with status 1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("/nonexistent/model"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace moe
