// DP-attention end to end: `mpirun -np W moe generate --prompts-file F
// --dp-attention on [--tp K] --ep M` (several prompts generated together, the scheduler
// spreading them over the attention groups) against the single-process run of the same
// batch: identical greedy tokens and text, each token's logprob within 1e-4 of the
// single-process one (the logits themselves are compared in
// tests/transformer/dp_decoder_test.cc). TP 1 x EP 2/4 and TP 2 x EP 2 (fused on/off) on
// the tiny Mixtral and DeepSeek-V3. Then `moe serve --dp-attention on` answering
// concurrent requests with one process's text (also under `--supervise`, through a
// worker kill), and each refusal by name.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>
#include <future>
#include <sstream>

#include "contains_util.h"
#include "safetensors_util.h"
#include "serve_process.h"
#include "supervise_stream.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::moe_binary;
using testing::run_command;
using testing::sh_quote;

const std::string kMixtral = testing::tiny_model_dir();
const std::string kDeepseek = testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare";

std::string mpirun(int np) {
  return "timeout 120 mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " ";
}

// Five prompts of different lengths (more sequences than groups, so every group has work).
const std::string& prompts_file() {
  static const testing::ScopedTempDir dir("dp_mpirun");
  static const std::string path = [] {
    const std::string p = dir.file("prompts.txt");
    std::ofstream out(p);
    out << "KING HENRY IV:\\nSo shaken as we are, so wan with care,\n"
        << "ROMEO:\n"
        << "JULIET:\\nO Romeo, Romeo! wherefore art thou Romeo?\n"
        << "HAMLET:\\nTo be, or not to be\n"
        << "First Citizen:\\nBefore we proceed any further, hear me speak.\n";
    return p;
  }();
  return path;
}

struct BatchRun {
  int exit_code = -1;
  std::string output;
  std::vector<nlohmann::json> lines;  // one per prompt, in order
};

BatchRun generate_batch(const std::string& prefix, const std::string& model, const std::string& extra) {
  auto r = run_command(prefix + moe_binary() + " --log-level info generate --model " + sh_quote(model) +
                       " --prompts-file " + sh_quote(prompts_file()) +
                       " --max-tokens 10 --temperature 0 --threads 1 --format json " + extra);
  BatchRun out;
  out.exit_code = r.exit_code;
  out.output = r.output;
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') out.lines.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return out;
}

struct Case {
  std::string name;
  int np;
  std::string flags;
  bool deepseek = false;
};

class DpMpirunTest : public ::testing::TestWithParam<Case> {};

TEST_P(DpMpirunTest, SameTokensAsOneProcess) {
  const Case& c = GetParam();
  const std::string& model = c.deepseek ? kDeepseek : kMixtral;
  const BatchRun one = generate_batch("", model, "");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(one.lines.size(), 5u) << one.output;
  const BatchRun dp = generate_batch(mpirun(c.np), model, "--comm-timeout 20 --dp-attention on " + c.flags);
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  EXPECT_CONTAINS(dp.output, "DP-attention:");
  ASSERT_EQ(dp.lines.size(), 5u) << dp.output;
  for (size_t i = 0; i < 5; ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i + 1));
    const auto &a = one.lines[i], &b = dp.lines[i];
    EXPECT_EQ(b["index"], a["index"]);
    EXPECT_EQ(b["output_token_ids"], a["output_token_ids"]);
    EXPECT_EQ(b["text"], a["text"]);
    ASSERT_EQ(b["logprobs"].size(), a["logprobs"].size());
    ASSERT_FALSE(a["logprobs"].empty());
    for (size_t t = 0; t < a["logprobs"].size(); ++t) {
      EXPECT_NEAR(b["logprobs"][t].get<double>(), a["logprobs"][t].get<double>(), 1e-4) << "token " << t;
    }
  }
}

const std::string kHybrid = "--tp 2 --ep 2 --ranks-per-node 2 ";

INSTANTIATE_TEST_SUITE_P(Strategies, DpMpirunTest,
                         ::testing::Values(Case{"np2_ep2", 2, "--ep 2"}, Case{"np4_ep4", 4, "--ep 4"},
                                           Case{"np4_hybrid_fused", 4, kHybrid + "--fused-moe on"},
                                           Case{"np4_hybrid_unfused", 4, kHybrid + "--fused-moe off"},
                                           Case{"np4_ep4_deepseek_v3", 4, "--ep 4 --ranks-per-node 2", true},
                                           Case{"np4_hybrid_fused_deepseek_v3", 4, kHybrid + "--fused-moe on", true}),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A bad command: non-zero exit and the message, without hanging (timeout's 124).
void expect_error(const testing::CommandResult& r, const std::string& message) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung:\n" << r.output;
  EXPECT_CONTAINS(r.output, message);
}

std::string generate_cmd(const std::string& flags) {
  return moe_binary() + " generate --model " + sh_quote(kMixtral) + " --prompt hi --max-tokens 2 --threads 1 " + flags;
}

TEST(DpMpirunErrors, RefusedByName) {
  expect_error(run_command("timeout 60 " + generate_cmd("--dp-attention on")),
               "--dp-attention on needs expert parallelism over several groups: run it under mpirun with --ep > 1");
  expect_error(run_command(mpirun(2) + generate_cmd("--tp 2 --dp-attention on --comm-timeout 20")),
               "--dp-attention on needs --ep > 1 (got --ep 1)");
  expect_error(run_command(mpirun(2) + generate_cmd("--ep 2 --dp-attention on --rebalance-every 4 --comm-timeout 20")),
               "--rebalance-every is not supported with --dp-attention on");
  expect_error(run_command(generate_cmd("--dp-attention on --comm-backend gloo")),
               "--dp-attention on with --comm-backend gloo: failover cannot re-form the DP-attention groups");
  const auto bad = run_command(generate_cmd("--dp-attention maybe"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_CONTAINS(bad.output, "--dp-attention");
}

TEST(DpMpirunErrors, PromptsFileErrorsNameTheFile) {
  testing::ScopedTempDir dir("dp_prompts");
  const std::string empty = dir.file("empty.txt");
  std::ofstream(empty) << "\n\n";
  const std::string base = moe_binary() + " generate --model " + sh_quote(kMixtral) + " --threads 1 ";
  expect_error(run_command(base + "--prompts-file " + empty), "--prompts-file " + empty + ": no prompt");
  expect_error(run_command(base + "--prompts-file " + dir.file("missing.txt")), "missing.txt: cannot be read");
  expect_error(run_command(base + "--prompts-file " + prompts_file() + " --prompt hi"),
               "--prompt and --prompts-file exclude each other");
  expect_error(run_command(base + "--prompts-file " + prompts_file() + " --logits-out x.f32"),
               "--logits-out is for one --prompt");
  expect_error(run_command(base + "--prompts-file " + prompts_file() + " --max-tokens 0"),
               "--max-tokens must be >= 1 with --prompts-file");
}

// Concurrent requests (the scheduler assigns each to the least-loaded group) on 2 groups
// of 1 and on 2 groups of TP 2.
void expect_serves_single_process_text(const std::vector<std::string>& flags, int np) {
  testing::ServeProcess server(flags, np);
  ASSERT_GT(server.port(), 0) << server.log();
  const std::vector<std::string> prompts = testing::serve_prompts(4);
  std::vector<std::future<testing::Streamed>> replies;
  for (const std::string& p : prompts) {
    replies.push_back(std::async(std::launch::async, [&server, p] {
      return testing::stream_completion("127.0.0.1", server.port(), p, 12);
    }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(replies[i].get().text, testing::generate_text(prompts[i], 12)) << prompts[i];
  }
  EXPECT_EQ(server.terminate(60, server.rank0_pid()), 0) << server.log();
}

TEST(DpMpirunServe, ServesTheSingleProcessTextEp2) {
  expect_serves_single_process_text(
      {"--ep", "2", "--dp-attention", "on", "--threads", "1", "--comm-timeout", "20"}, 2);
}

TEST(DpMpirunServe, ServesTheSingleProcessTextTp2Ep2) {
  expect_serves_single_process_text({"--tp", "2", "--ep", "2", "--ranks-per-node", "2", "--dp-attention", "on",
                                     "--threads", "1", "--comm-timeout", "20"},
                                    4);
}

// Under the supervisor (`moe serve --supervise --ep 2 --dp-attention on`): the worker
// group it starts under mpirun serves the single-process text, and after kill -9 of rank
// 1 in the middle of a greedy stream the supervisor restarts the group and the stream
// ends with the fault-free text.
TEST(DpMpirunServe, UnderTheSupervisorSurvivesAWorkerKill) {
  testing::ServeProcess server({"--supervise", "--ep", "2", "--dp-attention", "on", "--threads", "1",
                                "--mpirun-arg=--allow-run-as-root", "--mpirun-arg=--oversubscribe", "--comm-timeout",
                                "20", "--recovery-timeout", "60", "--startup-timeout", "60"});
  ASSERT_GT(server.port(), 0) << server.log();
  const int port = server.port();
  const std::vector<std::string> prompts = testing::serve_prompts(3);
  std::vector<std::future<testing::Streamed>> replies;
  for (const std::string& p : prompts) {
    replies.push_back(std::async(std::launch::async, [port, p] {
      return testing::stream_completion("127.0.0.1", port, p, 12);
    }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(replies[i].get().text, testing::generate_text(prompts[i], 12)) << prompts[i];
  }
  const nlohmann::json greedy = {{"model", "tiny-mixtral-shakespeare"}, {"prompt", "ROMEO:\nWhat light"},
                                 {"max_tokens", 60}, {"temperature", 0}, {"ignore_eos", true}};
  const testing::SupervisedStream ref = testing::stream_request(port, greedy);
  ASSERT_EQ(ref.finish_reason, "length") << server.log();
  const std::vector<int64_t> pids = testing::worker_pids(port);
  ASSERT_EQ(pids.size(), 2u) << testing::health_json(port).dump();
  const testing::SupervisedStream killed =
      testing::stream_request(port, greedy, [&] { ::kill(static_cast<pid_t>(pids[1]), SIGKILL); });
  EXPECT_EQ(killed.error, "") << server.log();
  EXPECT_EQ(killed.finish_reason, "length");
  EXPECT_EQ(killed.text, ref.text);
  EXPECT_EQ(testing::metric_value(port, "moe:recoveries_total"), 1) << server.log();
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

}  // namespace
}  // namespace moe
