// `moe serve` flags: every bad value is refused before serving, with a message naming
// the flag (exit 1; parser errors exit 2); --help shows the deadlines; a busy port is an
// error; the shipped model
// serves /health and stops on SIGTERM with exit status 0.
#include <gtest/gtest.h>

#include "e2e/serve_process.h"
#include "test_util.h"

namespace moe {
namespace {

testing::CommandResult serve(const std::string& flags) {
  return testing::run_command(testing::moe_binary() + " serve --threads 1 " + flags + " 2>&1");
}

TEST(ServeCli, BadFlagValuesNameTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--port 70000", "--port"},
      {"--port -1", "--port"},
      {"--host ''", "--host"},
      {"--api-key ''", "--api-key"},
      {"--max-num-seqs 0", "--max-num-seqs"},
      {"--max-num-batched-tokens 0", "--max-num-batched-tokens"},
      {"--kv-block-size 0", "--kv-block-size"},
      {"--kv-cache-tokens -5", "--kv-cache-tokens"},
      {"--kv-cache-tokens 10", "--kv-cache-tokens"},
      {"--max-num-batched-tokens 8 --max-num-seqs 16", "--max-num-batched-tokens"},
      {"--host 999.1.1.1", "--host"},
      {"--max-tokens-limit -1", "--max-tokens-limit"},
      {"--max-tokens-limit 100000", "--max-tokens-limit"},
      {"--max-body-bytes 0", "--max-body-bytes"},
      {"--max-n 0", "--max-n"},
      {"--rate-limit-rps -1", "--rate-limit-rps"},
      {"--rate-limit-tpm nan", "--rate-limit-tpm"},
      {"--shutdown-grace -2", "--shutdown-grace"},
      {"--header-timeout 0", "--header-timeout must be a finite number of seconds > 0"},
      {"--header-timeout nan", "--header-timeout"},
      {"--max-connections-per-client -1", "--max-connections-per-client must be >= 0"},
      {"--skip-weight-check --fp8 native", "fp8_mode native (--fp8 native) applies to FP8 checkpoints"},
      {"--chat-template no-such-template", "--chat-template"},
      {"--chat-template /nonexistent/template.json", "--chat-template"},
      {"--ep 2", "--ep"},
      {"--comm-timeout 5", "--comm-timeout applies to expert parallelism (--ep > 1)"},
      {"--comm-timeout 0", "--comm-timeout must be a finite number of seconds > 0 (got 0)"},
      {"--comm-timeout inf", "--comm-timeout"},
      {"--liveness-timeout 0", "--liveness-timeout must be a finite number of seconds > 0"},
      {"--liveness-timeout 60", "--liveness-timeout (60) must be below --comm-timeout (60)"},
      {"--kv-cache-memory-bytes -1", "--kv-cache-memory-bytes must be >= 0"},
      {"--kv-cache-memory-bytes 1000000 --kv-cache-tokens 64", "--kv-cache-tokens and --kv-cache-memory-bytes both"},
      {"--memory-utilization 0", "--memory-utilization must be in (0, 1]"},
      {"--gpu-memory-utilization 1.5", "--memory-utilization must be in (0, 1]"},
      {"--enable-prefix-caching --no-enable-prefix-caching", "--enable-prefix-caching and --no-enable-prefix-caching"},
      {"--kv-reserve-max-tokens", "--kv-reserve-max-tokens needs --no-enable-prefix-caching"},
      {"--kv-offload-dir /tmp/x --no-enable-prefix-caching", "--kv-offload-dir needs prefix caching"},
      {"--kv-offload-bytes -1", "--kv-offload-bytes must be >= 0"},
      {"--kv-offload-bytes 1000000", "--kv-offload-bytes needs --kv-offload-dir"},
      // A pool that cannot fit beside the weights: refused at start, with the numbers.
      {"--kv-cache-memory-bytes 1000000000000000", "the KV cache ("},
  };
  for (const auto& [flags, name] : cases) {
    auto r = serve(flags);
    EXPECT_EQ(r.exit_code, 1) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find("error: " + name), std::string::npos) << flags << "\n" << r.output;
  }
  for (const std::string flags : {"--batch-invariant maybe", "--port abc", "--no-such-flag", "--a2a-mode ring"}) {
    auto r = serve(flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
  }
}

// --supervise --comm-backend gloo: the liveness timeout must outlast a failover's pause
// (--comm-timeout + --failover-join), else the supervisor replaces the group mid-failover.
// Checked before any worker group starts (--mpirun points nowhere).
TEST(ServeCli, GlooSupervisedLivenessMustOutlastAFailover) {
  const std::string base = "--supervise --comm-backend gloo --ep 3 --port 0 --mpirun /nonexistent/mpirun ";
  auto r = serve(base + "--comm-timeout 3 --liveness-timeout 5");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: --liveness-timeout (5) must be above --comm-timeout + --failover-join (6 s) with "
                          "--supervise --comm-backend gloo"),
            std::string::npos)
      << r.output;
  r = serve(base + "--comm-timeout 3 --failover-join 10 --liveness-timeout 12");
  EXPECT_NE(r.output.find("must be above --comm-timeout + --failover-join (13 s)"), std::string::npos) << r.output;
  // Above the pause: the flags pass, and the (missing) mpirun is what fails.
  r = serve(base + "--comm-timeout 3 --liveness-timeout 7");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot start the worker group '/nonexistent/mpirun'"), std::string::npos) << r.output;
}

TEST(ServeCli, HelpShowsTheDeadlines) {
  auto r = testing::run_command(testing::moe_binary() + " serve --help 2>&1");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--comm-timeout FLOAT=60"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--liveness-timeout"), std::string::npos) << r.output;
  auto g = testing::run_command(testing::moe_binary() + " generate --help 2>&1");
  EXPECT_NE(g.output.find("--comm-timeout FLOAT=60"), std::string::npos) << g.output;
}

TEST(ServeCli, ServesHealthAndStopsOnSigterm) {
  testing::ServeProcess server({"--threads", "1"});
  ASSERT_GT(server.port(), 0) << server.log();
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  auto health = testing::run_command("curl -s -S " + url + "/health");
  EXPECT_EQ(health.output, R"({"status":"ok"})");
  // A second server on the same port fails clearly.
  auto busy = serve("--port " + std::to_string(server.port()));
  EXPECT_EQ(busy.exit_code, 1) << busy.output;
  EXPECT_NE(busy.output.find("cannot listen on 127.0.0.1:" + std::to_string(server.port())), std::string::npos)
      << busy.output;
  EXPECT_EQ(server.terminate(), 0) << server.log();
  EXPECT_NE(server.log().find("stopped"), std::string::npos) << server.log();
}

}  // namespace
}  // namespace moe
