// Tensor parallelism end to end: `mpirun -np W moe generate --tp K [--ep M]`
// against the single-process run of the same model: identical greedy tokens and text,
// last prompt position's logits within 1e-4 of the logit range. Pure TP (--tp 2, --tp 4),
// hybrid TP-in-node x EP-across-nodes (--tp 2 --ep 2 --ranks-per-node 2) with the fused
// RS -> A2A -> AG MoE path on and off, flat and hierarchical all-to-all, on the tiny
// Mixtral (GQA) and DeepSeek-V3 (MLA, shared expert, a dense first layer) models. Then
// every bad-input error message, and `moe serve --tp 2` answering with one process's text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <signal.h>
#include <nlohmann/json.hpp>
#include <thread>

#include "contains_util.h"
#include "generate_run.h"
#include "safetensors_util.h"
#include "serve_process.h"
#include "supervise_stream.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::moe_binary;
using testing::run_command;
using testing::sh_quote;

const char* kPrompt = "KING HENRY IV:\nSo shaken as we are, so wan with care,";
const std::string kMixtral = testing::tiny_model_dir();
const std::string kDeepseek = testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare";

std::string mpirun(int np) {
  return "timeout 120 mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " ";
}

testing::GenRun generate(const std::string& prefix, const std::string& model, const std::string& extra,
                         const std::string& tag) {
  static const testing::ScopedTempDir dir("tp_mpirun");
  const std::string logits = dir.file(tag + ".f32");
  auto r = run_command(prefix + moe_binary() + " generate --model " + sh_quote(model) + " --prompt " +
                       sh_quote(kPrompt) + " --max-tokens 12 --temperature 0 --threads 1 --format json --logits-out " +
                       logits + " --comm-timeout 20 " + extra);
  return testing::parse_generate_run(r, logits);
}

// The single-process run of `model` without any flags (--comm-timeout needs mpirun).
testing::GenRun single(const std::string& model) {
  static const testing::ScopedTempDir dir("tp_single");
  const std::string logits = dir.file("single.f32");
  auto r = run_command(moe_binary() + " generate --model " + sh_quote(model) + " --prompt " + sh_quote(kPrompt) +
                       " --max-tokens 12 --temperature 0 --threads 1 --format json --logits-out " + logits);
  return testing::parse_generate_run(r, logits);
}

std::vector<float> as_f32(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

struct Case {
  std::string name;
  int np;
  std::string flags;
  bool deepseek = false;
};

class TpMpirunTest : public ::testing::TestWithParam<Case> {};

TEST_P(TpMpirunTest, SameTokensAndLogitsAsOneProcess) {
  const Case& c = GetParam();
  const std::string& model = c.deepseek ? kDeepseek : kMixtral;
  const testing::GenRun one = single(model);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_TRUE(one.json.contains("output_token_ids")) << one.output;
  const testing::GenRun tp = generate(mpirun(c.np), model, c.flags, c.name);
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  ASSERT_TRUE(tp.json.contains("output_token_ids")) << "no JSON from rank 0:\n" << tp.output;
  EXPECT_EQ(tp.json["output_token_ids"], one.json["output_token_ids"]);
  EXPECT_EQ(tp.json["text"], one.json["text"]);
  const std::vector<float> a = as_f32(one.logits), b = as_f32(tp.logits);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  const auto [mn, mx] = std::minmax_element(a.begin(), a.end());
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
  EXPECT_LE(max_diff / (*mx - *mn), 1e-4) << "max |diff| " << max_diff;
}

const std::string kHybrid = "--tp 2 --ep 2 --ranks-per-node 2 ";

INSTANTIATE_TEST_SUITE_P(
    Strategies, TpMpirunTest,
    ::testing::Values(Case{"np2_tp2", 2, "--tp 2"}, Case{"np2_tp2_deepseek_v3", 2, "--tp 2", true},
                      Case{"np4_tp4_deepseek_v3", 4, "--tp 4", true},
                      Case{"np4_hybrid_fused", 4, kHybrid + "--fused-moe on"},
                      Case{"np4_hybrid_unfused", 4, kHybrid + "--fused-moe off"},
                      Case{"np4_hybrid_unfused_flat", 4, kHybrid + "--fused-moe off --a2a-mode flat"},
                      Case{"np4_hybrid_fused_flat", 4, kHybrid + "--fused-moe on --a2a-mode flat"},
                      Case{"np4_hybrid_fused_overlap", 4, kHybrid + "--fused-moe on --ep-overlap"},
                      Case{"np4_hybrid_fused_deepseek_v3", 4, kHybrid + "--fused-moe on", true},
                      Case{"np4_hybrid_unfused_deepseek_v3", 4, kHybrid + "--fused-moe off", true}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A bad command: exit 1 and the message, without hanging (timeout's 124).
void expect_error(const testing::CommandResult& r, const std::string& message) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung:\n" << r.output;
  EXPECT_CONTAINS(r.output, message);
}

std::string generate_cmd(const std::string& model, const std::string& flags) {
  return moe_binary() + " generate --model " + sh_quote(model) + " --prompt hi --max-tokens 2 --threads 1 " + flags;
}

TEST(TpMpirunErrors, WorldSizeMustBeTpTimesEp) {
  expect_error(run_command(mpirun(2) + generate_cmd(kMixtral, "--tp 2 --ep 2")),
               "--tp 2 x --ep 2 = 4 but mpirun started 2 ranks; they must match");
  expect_error(run_command(mpirun(3) + generate_cmd(kMixtral, "--tp 2")),
               "--tp 2 does not divide the 3 ranks mpirun started");
}

TEST(TpMpirunErrors, TpGroupMustNotSpanNodes) {
  expect_error(run_command(mpirun(4) + generate_cmd(kMixtral, "--tp 2 --ep 2 --ranks-per-node 1")),
               "a TP group must lie inside one node");
}

TEST(TpMpirunErrors, HeadsMustDivideByTp) {
  // The tiny Mixtral has 2 key/value heads: --tp 4 cannot split them.
  const auto r = run_command(mpirun(4) + generate_cmd(kMixtral, "--tp 4"));
  expect_error(r, "num_key_value_heads");
  EXPECT_CONTAINS(r.output, "--tp 4");
}

TEST(TpErrors, FlagsNamedWithoutMpirun) {
  expect_error(run_command(generate_cmd(kMixtral, "--tp 2")), "--tp 2 needs 2 processes: run it as mpirun -np 2");
  expect_error(run_command(generate_cmd(kMixtral, "--tp 0")), "--tp must be >= 1 (got 0)");
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--tp 2 --rebalance-every 4", "--rebalance-every is not supported with --tp 2"},
           {"--tp 2 --min-replicas 2", "--min-replicas > 1 is not supported with --tp 2"},
           {"--tp 2 --placement plan.json", "--placement is not supported with --tp 2"},
           {"--tp 2 --comm-backend gloo", "--tp 2 with --comm-backend gloo"}}) {
    const auto r = run_command(generate_cmd(kMixtral, flags));
    EXPECT_EQ(r.exit_code, 1) << flags << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "error: " + message);
  }
  const auto bad = run_command(generate_cmd(kMixtral, "--fused-moe maybe"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_CONTAINS(bad.output, "--fused-moe");
}

TEST(TpMpirunServe, ServesTheSingleProcessText) {
  testing::ServeProcess server({"--tp", "2", "--threads", "1", "--comm-timeout", "20"}, /*mpirun_np=*/2);
  ASSERT_GT(server.port(), 0) << server.log();
  for (const char* prompt : {"ROMEO:", "JULIET:\nO Romeo"}) {
    EXPECT_EQ(testing::stream_completion("127.0.0.1", server.port(), prompt, 16).text,
              testing::generate_text(prompt, 16))
        << prompt;
  }
  EXPECT_EQ(server.terminate(60, server.rank0_pid()), 0) << server.log();
}

// The supervised worker group under TP: the worker protocol talks to rank 0 only; both
// ranks of the TP group are restarted after kill -9 of the follower (rank 1) mid-stream,
// and the stream resumes with the fault-free greedy text.
TEST(TpMpirunServe, SupervisedGroupRestartsAfterTheFollowerDies) {
  testing::ServeProcess server({"--supervise", "--tp", "2", "--threads", "1", "--mpirun-arg=--allow-run-as-root",
                                "--mpirun-arg=--oversubscribe", "--comm-timeout", "5", "--liveness-timeout", "2",
                                "--recovery-timeout", "60", "--startup-timeout", "60"});
  ASSERT_GT(server.port(), 0) << server.log();
  const int port = server.port();
  const nlohmann::json greedy = {{"model", "tiny-mixtral-shakespeare"}, {"prompt", "ROMEO:\nWhat light"},
                                 {"max_tokens", 40}, {"temperature", 0}};
  const testing::SupervisedStream ref = testing::stream_request(port, greedy);
  ASSERT_EQ(ref.status, 200) << server.log();
  EXPECT_EQ(ref.text, testing::generate_text("ROMEO:\nWhat light", 40));
  const std::vector<int64_t> pids = testing::worker_pids(port);
  ASSERT_EQ(pids.size(), 2u) << testing::health_json(port).dump();
  const testing::SupervisedStream g =
      testing::stream_request(port, greedy, [&] { ::kill(static_cast<pid_t>(pids[1]), SIGKILL); });
  EXPECT_EQ(g.status, 200);
  EXPECT_EQ(g.error, "") << server.log();
  EXPECT_EQ(g.text, ref.text);
  double recoveries = 0;  // the supervisor's copy of the counter may lag a moment: poll
  for (int i = 0; i < 200 && recoveries != 1; ++i) {
    recoveries = testing::metric_value(port, "moe:recoveries_total");
    if (recoveries != 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(recoveries, 1) << server.log();
  EXPECT_EQ(server.terminate(), 0) << server.log();
}

}  // namespace
}  // namespace moe
