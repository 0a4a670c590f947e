// Level 1 of fault tolerance, end to end: `mpirun --enable-recovery -np 3 moe serve
// --ep 3 --comm-backend gloo --min-replicas 2`, with a long greedy streamed request in
// flight when rank 2 is SIGKILLed. Rank 0 and rank 1 re-form the group without a
// restart: the stream goes on to the end with no error, its text equals `moe generate`,
// /metrics counts one failover and one failed rank, and a second request afterwards is
// exact too. Also: `--comm-backend gloo` outside mpirun is refused by name.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <thread>
#include <regex>

#include <gtest/gtest.h>

#include "contains_util.h"
#include "safetensors_util.h"
#include "serve_process.h"

namespace moe {
namespace {

using testing::ServeProcess;

double metric(const std::string& text, const std::string& name) {
  const std::regex re("\n" + name + " ([0-9.e+-]+)");
  std::smatch m;
  return std::regex_search(text, m, re) ? std::stod(m[1].str()) : -1;
}

TEST(ServeFailoverMpirun, KilledRankFailsOverWithoutLosingTheStream) {
  const std::string prompt = "ROMEO:";
  const int max_tokens = 200;
  const std::string expected = testing::generate_text(prompt, max_tokens);  // 200 tokens, no EOS
  testing::ScopedTempDir store("serve_failover");  // the rendezvous directory (the server is SIGKILLed at the end)
  ServeProcess server({"--ep", "3", "--comm-backend", "gloo", "--min-replicas", "2", "--comm-timeout", "3",
                       "--threads", "1", "--gloo-store", store.file("gloo")},
                      3, "", {"--enable-recovery"});
  ASSERT_GT(server.port(), 0) << server.log();
  const pid_t victim = server.rank_pid(2);
  ASSERT_GT(victim, 0);
  std::atomic<bool> first{false};
  auto streamed = std::async(std::launch::async, [&] {
    return testing::stream_completion("127.0.0.1", server.port(), prompt, max_tokens, /*ignore_eos=*/false, &first);
  });
  for (int i = 0; i < 3000 && !first; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(first.load());
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const testing::Streamed s = streamed.get();
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.done) << server.log();
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.text, expected) << server.log();

  httplib::Client cli("127.0.0.1", server.port());
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;
  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metric(metrics->body, "moe:failovers_total"), 1) << metrics->body;
  EXPECT_EQ(metric(metrics->body, "moe:rank_failures_total"), 1);
  EXPECT_EQ(metric(metrics->body, "moe:lost_experts"), 0);
  EXPECT_EQ(metric(metrics->body, "moe:degraded_tokens_total"), 0);  // every expert had a replica on a survivor
  // Serving goes on, exact, on the two survivors.
  const testing::Streamed again = testing::stream_completion("127.0.0.1", server.port(), prompt, 40);
  EXPECT_EQ(again.text, testing::generate_text(prompt, 40));
  EXPECT_CONTAINS(server.log(), "EP group re-formed: 2 of 3 ranks");
}

// The ranks do not initialise MPI, so nothing MPI-side would end them if mpirun were
// killed: they die with it (no stray group serving on).
TEST(ServeFailoverMpirun, RanksDieWithTheirMpirun) {
  testing::ScopedTempDir store("serve_failover_orphans");
  const std::string marker = store.file("gloo");
  {
    ServeProcess server({"--ep", "2", "--comm-backend", "gloo", "--threads", "1", "--gloo-store", marker}, 2, "",
                        {"--enable-recovery"});
    ASSERT_GT(server.port(), 0) << server.log();
    ASSERT_GT(server.rank_pid(1), 0);
  }  // SIGKILL to mpirun's process group (the ranks are in groups of their own)
  // Processes whose command line names the marker (the two ranks).
  auto count_left = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::ifstream in(e.path() / "cmdline", std::ios::binary);
      std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmd.find(marker) != std::string::npos && cmd.find("serve") != std::string::npos) ++n;
    }
    return n;
  };
  int left = -1;
  for (int i = 0; i < 250 && left != 0; ++i) {
    left = count_left();
    if (left != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(left, 0);
}

TEST(ServeFailoverMpirun, GlooBackendNeedsMpirun) {
  const testing::CommandResult r =
      testing::run_command(testing::moe_binary() + " serve --comm-backend gloo --port 0 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "--comm-backend gloo: run under mpirun --enable-recovery");
  // Gloo's own flags without it are refused by name, not ignored.
  for (const std::string flag : {"--failover-wait 1", "--failover-join 10", "--gloo-store /tmp/x", "--gloo-host 10.0.0.1"}) {
    const testing::CommandResult g =
        testing::run_command(testing::moe_binary() + " generate --prompt x --max-tokens 1 " + flag + " 2>&1");
    EXPECT_EQ(g.exit_code, 1) << flag << ": " << g.output;
    EXPECT_CONTAINS(g.output, flag.substr(0, flag.find(' ')) + " applies to --comm-backend gloo");
  }
  const testing::CommandResult bad = testing::run_command(
      testing::moe_binary() + " generate --prompt x --max-tokens 1 --failover-wait -1 2>&1");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_CONTAINS(bad.output, "--failover-wait must be a finite number of seconds >= 0");
  for (const std::string value : {"0", "-2", "inf"}) {
    const testing::CommandResult join = testing::run_command(
        testing::moe_binary() + " generate --prompt x --max-tokens 1 --failover-join " + value + " 2>&1");
    EXPECT_EQ(join.exit_code, 1) << value << ": " << join.output;
    EXPECT_CONTAINS(join.output, "--failover-join must be a finite number of seconds > 0");
  }
}

}  // namespace
}  // namespace moe
