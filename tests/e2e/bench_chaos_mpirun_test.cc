// `moe bench chaos` end to end: 3 kill trials on the shipped model with --ep 2 under
// mpirun, with short timeouts, checked through the --json report. Against plain `moe
// serve` (today: a killed rank ends the job): no hang, every process gone after each
// trial, and every request that completed equals the fault-free run. Against the
// supervised front end (`moe serve --supervise`, when this build has it): no request
// lost and every output equal. Also the flag checks, which start nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "e2e/serve_process.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::moe_binary;
using testing::run_command;
using testing::sh_quote;

struct ChaosRun {
  testing::CommandResult result;
  nlohmann::json report;
};

ChaosRun run_chaos(const std::string& flags) {
  const std::string dir = testing::make_temp_dir("bench_chaos");
  const std::string json_path = dir + "/chaos.json";
  ChaosRun run;
  run.result = run_command("timeout 170 " + moe_binary() + " bench chaos --model " +
                           sh_quote(testing::tiny_model_dir()) + " --json " + sh_quote(json_path) + " " + flags +
                           " 2>&1");
  std::ifstream in(json_path);
  if (in) run.report = nlohmann::json::parse(in, nullptr, false);
  std::filesystem::remove_all(dir);
  return run;
}

// Each trial: it ran, injected its fault into a rank, did not hang, accounted for every
// request, left no process behind, and every completed output equals the reference.
void expect_sound_trials(const nlohmann::json& report, int trials, int requests) {
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(report["trials"].size(), static_cast<size_t>(trials));
  for (const auto& t : report["trials"]) {
    SCOPED_TRACE("trial " + std::to_string(t["trial"].get<int>()));
    EXPECT_EQ(t["setup_error"], "");
    EXPECT_EQ(t["fault"], "kill");
    EXPECT_TRUE(t["target"] == "rank 0" || t["target"] == "rank 1") << t["target"];
    EXPECT_GE(t["fault_at_s"].get<double>(), 0.0);
    EXPECT_FALSE(t["hang"].get<bool>());
    EXPECT_EQ(t["leftover"], 0);
    const auto& c = t["counts"];
    EXPECT_EQ(c["requests"], requests);
    EXPECT_EQ(c["completed"].get<int>() + c["lost"].get<int>() + c["errored"].get<int>(), requests);
    EXPECT_EQ(c["greedy_equal"], c["greedy_completed"]);
    EXPECT_EQ(c["seeded_equal"], c["seeded_completed"]);
  }
  EXPECT_EQ(report["totals"]["hangs"], 0);
  EXPECT_EQ(report["totals"]["trials_with_leftovers"], 0);
}

const char* kFlags =
    "--ep 2 --trials 3 --faults kill --requests 8 --concurrency 4 --max-tokens 12 --seed 3 --hang-seconds 10 "
    "--exit-grace 5 --start-timeout 30 --mpirun-arg --oversubscribe --server-arg '--threads 1'";

TEST(BenchChaosMpirun, KillTrialsAgainstPlainServeNeitherHangNorLeaveProcesses) {
  ChaosRun run = run_chaos(kFlags);
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  expect_sound_trials(run.report, 3, 8);
  // The reference is right: request 0 (greedy, /v1/completions, not streamed) equals
  // `moe generate` on its prompt.
  const auto& texts = run.report["reference"]["texts"];
  ASSERT_EQ(texts.size(), 8u);
  EXPECT_EQ(texts[0].get<std::string>(), testing::generate_text("ROMEO:\n", 12));
  // The table and the progress lines name what happened.
  EXPECT_NE(run.result.output.find("reference: 8 requests completed"), std::string::npos) << run.result.output;
  EXPECT_NE(run.result.output.find("hangs: 0"), std::string::npos);
  EXPECT_NE(run.result.output.find("mpirun"), std::string::npos);
}

TEST(BenchChaosMpirun, AShortStopIsARecoveredPause) {
  // SIGSTOP of a rank for 1 s, well within the server's deadline: every request
  // completes with the reference output, and the recovery time is the pause.
  ChaosRun run = run_chaos(
      "--ep 2 --trials 1 --faults stop --stop-seconds 1 --requests 8 --concurrency 4 --max-tokens 48 --seed 5 "
      "--hang-seconds 10 --exit-grace 5 --start-timeout 30 --mpirun-arg --oversubscribe --server-arg '--threads 1'");
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  ASSERT_EQ(run.report["trials"].size(), 1u) << run.result.output;
  const auto& t = run.report["trials"][0];
  EXPECT_EQ(t["fault"], "stop");
  EXPECT_FALSE(t["hang"].get<bool>());
  EXPECT_EQ(t["leftover"], 0);
  EXPECT_EQ(t["server_end"], "running");
  EXPECT_EQ(t["counts"]["completed"], 8) << run.result.output;
  EXPECT_EQ(t["counts"]["greedy_equal"], 4);
  EXPECT_EQ(t["counts"]["seeded_equal"], 4);
  ASSERT_TRUE(t["recovery_s"].is_number()) << run.result.output;
  EXPECT_GE(t["recovery_s"].get<double>(), 0.9);
  EXPECT_LT(t["recovery_s"].get<double>(), 6.0);
}

TEST(BenchChaosMpirun, KillTrialsAgainstTheSupervisorLoseNothing) {
  const auto help = run_command(moe_binary() + " serve --help 2>&1");
  if (help.output.find("--supervise") == std::string::npos) GTEST_SKIP() << "this build has no moe serve --supervise";
  ChaosRun run = run_chaos(std::string(kFlags) + " --supervise --spare-front-end");
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  expect_sound_trials(run.report, 3, 8);
  const auto& totals = run.report["totals"]["rank_faults"];
  EXPECT_EQ(totals["lost"], 0) << run.result.output;
  EXPECT_EQ(totals["errored"], 0);
  EXPECT_EQ(totals["greedy_equal"], totals["greedy_completed"]);
  EXPECT_EQ(totals["completed"], 24);
  // The supervisor counted each failure and recovery.
  const auto& counters = run.report["totals"]["fault_metrics"];
  EXPECT_EQ(counters.value("moe:worker_failures_total", 0.0), 3.0) << counters;
  EXPECT_EQ(counters.value("moe:recoveries_total", 0.0), 3.0) << counters;
  EXPECT_EQ(run.report["totals"]["recovered"], 3);
}

TEST(BenchChaosMpirun, FlagErrorsNameTheFlag) {
  auto r = run_command(moe_binary() + " bench chaos --ep 5 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--ep must be 2, 3 or 4"), std::string::npos) << r.output;
  r = run_command(moe_binary() + " bench chaos --faults kill,melt 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown fault 'melt'"), std::string::npos) << r.output;
  r = run_command(moe_binary() + " bench chaos --faults corrupt --model " + sh_quote(testing::tiny_model_dir()) +
                  " 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("expert store"), std::string::npos) << r.output;
  r = run_command(moe_binary() + " bench chaos --hang-seconds 0 2>&1");
  EXPECT_NE(r.output.find("--hang-seconds must be > 0"), std::string::npos) << r.output;
  r = run_command(moe_binary() + " bench chaos --no-such-flag 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  r = run_command(moe_binary() + " bench chaos --help 2>&1");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--supervise", "--server-arg", "--mpirun-arg", "--requests", "--concurrency", "--faults",
                           "--stop-seconds", "--hang-seconds", "--json", "--seed", "--trials"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace moe
