// `moe serve --supervise --ep 2`: the worker group runs under mpirun. kill -9 of rank 1,
// then of rank 0, then SIGSTOP of rank 1 (rank 0's /health says "stalled" after
// --liveness-timeout), mid-stream: each time the supervisor replaces the whole group and
// the streamed text equals the fault-free run's (greedy and seeded). --supervise itself
// under mpirun is refused. With --comm-backend gloo, a worker rank's death is a failover
// (no restart) and rank 0's a restart.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <thread>

#include "contains_util.h"
#include "serve_process.h"
#include "supervise_stream.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::ServeProcess;

json request(const std::string& prompt, int max_tokens, double temperature, int seed = -1) {
  json b = {{"model", "tiny-mixtral-shakespeare"}, {"prompt", prompt}, {"max_tokens", max_tokens},
            {"temperature", temperature}, {"ignore_eos", true}};
  if (seed >= 0) b["seed"] = seed;
  return b;
}

TEST(SuperviseMpirun, KillingRank1ThenRank0AndStoppingRank1MidStreamLosesNothing) {
  ServeProcess server({"--supervise", "--ep", "2", "--threads", "1", "--mpirun-arg=--allow-run-as-root",
                       "--mpirun-arg=--oversubscribe", "--liveness-timeout", "2", "--recovery-timeout", "60",
                       "--startup-timeout", "60"});
  ASSERT_GT(server.port(), 0) << server.log();
  const int port = server.port();
  const json greedy = request("ROMEO:\nWhat light", 80, 0);
  const json seeded = request("JULIET:\nO Romeo", 80, 0.8, 11);
  const testing::SupervisedStream greedy_ref = testing::stream_request(port, greedy);
  const testing::SupervisedStream seeded_ref = testing::stream_request(port, seeded);
  ASSERT_EQ(greedy_ref.finish_reason, "length") << server.log();
  ASSERT_EQ(seeded_ref.finish_reason, "length") << server.log();

  for (const auto& fault : std::vector<std::pair<int, int>>{{1, SIGKILL}, {0, SIGKILL}, {1, SIGSTOP}}) {
    const int victim = fault.first, signal_number = fault.second;
    SCOPED_TRACE("signal " + std::to_string(signal_number) + " to rank " + std::to_string(victim));
    const std::vector<int64_t> pids = testing::worker_pids(port);
    ASSERT_EQ(pids.size(), 2u) << testing::health_json(port).dump();
    ASSERT_GT(pids[victim], 0);
    const double failures = testing::metric_value(port, "moe:worker_failures_total");
    std::atomic<bool> seeded_started{false};
    auto seeded_run = std::async(std::launch::async, [&] {
      return testing::stream_request(port, seeded, [&] { seeded_started = true; });
    });
    for (int i = 0; i < 3000 && !seeded_started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(seeded_started.load());
    const testing::SupervisedStream g = testing::stream_request(
        port, greedy, [&] { ::kill(static_cast<pid_t>(pids[victim]), signal_number); });
    const testing::SupervisedStream s = seeded_run.get();
    for (const auto* r : {&g, &s}) {
      EXPECT_EQ(r->status, 200);
      EXPECT_EQ(r->error, "") << server.log();
      EXPECT_EQ(r->finish_reason, "length");
      EXPECT_EQ(r->done, 1);
    }
    EXPECT_EQ(g.text, greedy_ref.text);
    EXPECT_EQ(s.text, seeded_ref.text);
    EXPECT_EQ(testing::metric_value(port, "moe:worker_failures_total"), failures + 1) << server.log();
    const std::vector<int64_t> after = testing::worker_pids(port);
    ASSERT_EQ(after.size(), 2u);
    EXPECT_NE(after[victim], pids[victim]);
  }
  EXPECT_EQ(testing::metric_value(port, "moe:recoveries_total"), 3);
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

// A counter once it reaches `want` (the supervisor's copy of the worker's counters may
// lag a moment on a busy machine), polled for up to 10 s; else its last value.
double metric_reaching(int port, const std::string& name, double want) {
  double v = -1;
  for (int i = 0; i < 200; ++i) {
    v = testing::metric_value(port, name);
    if (v == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return v;
}

// With --comm-backend gloo the two levels combine: kill -9 of rank 2 mid-stream is a
// failover inside the group (no restart, no replay: the same worker pids serve on), then
// kill -9 of rank 0 is a restart. Both streams equal the fault-free text.
TEST(SuperviseMpirun, GlooWorkerDeathIsAFailoverAndRank0DeathARestart) {
  ServeProcess server({"--supervise", "--ep", "3", "--threads", "1", "--comm-backend", "gloo", "--min-replicas", "2",
                       "--comm-timeout", "3", "--failover-join", "10", "--mpirun-arg=--allow-run-as-root",
                       "--mpirun-arg=--oversubscribe", "--recovery-timeout", "60", "--startup-timeout", "60"});
  ASSERT_GT(server.port(), 0) << server.log();
  const int port = server.port();
  const json greedy = request("ROMEO:\nWhat light", 80, 0);
  const testing::SupervisedStream ref = testing::stream_request(port, greedy);
  ASSERT_EQ(ref.finish_reason, "length") << server.log();

  const std::vector<int64_t> pids = testing::worker_pids(port);
  ASSERT_EQ(pids.size(), 3u) << testing::health_json(port).dump();
  const testing::SupervisedStream g1 =
      testing::stream_request(port, greedy, [&] { ::kill(static_cast<pid_t>(pids[2]), SIGKILL); });
  EXPECT_EQ(g1.error, "") << server.log();
  EXPECT_EQ(g1.text, ref.text);
  EXPECT_EQ(metric_reaching(port, "moe:failovers_total", 1), 1) << server.log();
  // One rank died; a survivor that does not reach the re-formation within its join window
  // (the default 3 s left one out once, on a loaded machine in a -j2 suite) is left out
  // too, by design. Here --failover-join 10: the re-formation says it used that window, and
  // the supervisor's liveness default (--comm-timeout + --failover-join + 2 s) does not
  // take the failover's pause (up to 3 s + 10 s) for a stall.
  const double lost = metric_reaching(port, "moe:rank_failures_total", 1);
  EXPECT_GE(lost, 1);
  EXPECT_LE(lost, 2) << server.log();
  EXPECT_CONTAINS(server.log(), "re-forming it with the ranks that answer within 10 s");
  EXPECT_EQ(testing::metric_value(port, "moe:worker_failures_total"), 0);  // no restart
  EXPECT_EQ(testing::worker_pids(port)[0], pids[0]);                      // the same group serves on

  const testing::SupervisedStream g2 =
      testing::stream_request(port, greedy, [&] { ::kill(static_cast<pid_t>(pids[0]), SIGKILL); });
  EXPECT_EQ(g2.error, "") << server.log();
  EXPECT_EQ(g2.text, ref.text);
  EXPECT_EQ(metric_reaching(port, "moe:worker_failures_total", 1), 1) << server.log();
  EXPECT_EQ(metric_reaching(port, "moe:recoveries_total", 1), 1);
  EXPECT_NE(testing::worker_pids(port)[0], pids[0]);
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

TEST(SuperviseMpirun, SuperviseUnderMpirunIsRefused) {
  auto r = testing::run_command("mpirun --allow-run-as-root --oversubscribe -np 1 " + testing::moe_binary() +
                                " serve --port 0 --supervise 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--supervise starts the worker group"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace moe
