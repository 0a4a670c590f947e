// `mpirun -np N moe generate --ep N ...` (real MPI processes) against the single-process
// run: identical greedy tokens and text, final prompt logits within 1e-4 of the logit
// range; flat and hierarchical (emulated 2 ranks per node), each with and without overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace moe {
namespace {

using testing::moe_binary;
using testing::read_f32;
using testing::run_command;

const char* kPrompt = "KING HENRY IV:\nSo shaken as we are, so wan with care,";

std::string mpirun(int np) {
  return "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " ";
}

struct GenRun {
  nlohmann::json json;
  std::vector<float> logits;
  nlohmann::json stats;  // --stats-out
};

GenRun run(const std::string& prefix, const std::string& extra, const std::string& tag) {
  // A private directory per run: ctest runs the parameterised cases as parallel processes.
  static const std::string dir = testing::make_temp_dir("ep_mpirun");
  const std::string logits = dir + "/" + tag + ".f32", stats = dir + "/" + tag + ".stats.json";
  auto r = run_command(prefix + moe_binary() + " generate --prompt " + testing::sh_quote(kPrompt) +
                       " --max-tokens 24 --temperature 0 --threads 1 --format json --logits-out " + logits +
                       " --stats-out " + stats + " " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  GenRun out;
  // The JSON object is the line starting with '{' (mpirun may add other lines).
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') out.json = nlohmann::json::parse(line);
  }
  out.logits = read_f32(logits);
  out.stats = nlohmann::json::parse(testing::read_file(stats), nullptr, false);
  return out;
}

const std::string kDeepseek = "--model " + testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare";

struct Case {
  int np;
  std::string flags;        // EP-only flags
  std::string model_flags{};  // given to the single-process run too (capacity policy)
};

class EpMpirunTest : public ::testing::TestWithParam<Case> {};

TEST_P(EpMpirunTest, SameTokensAndLogitsAsOneProcess) {
  const Case& c = GetParam();
  const GenRun single = run("", c.model_flags, "single");
  ASSERT_TRUE(single.json.contains("output_token_ids"));
  const GenRun ep = run(mpirun(c.np), "--ep " + std::to_string(c.np) + " " + c.flags + " " + c.model_flags,
                        "ep" + std::to_string(c.np));
  // Load statistics are global over the EP group: identical counts (EMA up to rounding).
  ASSERT_TRUE(single.stats.is_object() && ep.stats.is_object());
  ASSERT_EQ(ep.stats["layers"].size(), single.stats["layers"].size());
  for (size_t l = 0; l < single.stats["layers"].size(); ++l) {
    for (const char* key : {"tokens_per_expert", "dropped", "rerouted", "steps"}) {
      EXPECT_EQ(ep.stats["layers"][l][key], single.stats["layers"][l][key]) << key << " layer " << l;
    }
  }
  if (c.model_flags.find("--capacity-factor") != std::string::npos) {  // the capacity really binds in these cases
    int64_t affected = 0;
    for (const auto& layer : single.stats["layers"]) affected += layer["dropped"].get<int64_t>() + layer["rerouted"].get<int64_t>();
    EXPECT_GT(affected, 0);
  }
  ASSERT_TRUE(ep.json.contains("output_token_ids")) << "no JSON from rank 0";
  EXPECT_EQ(ep.json["output_token_ids"], single.json["output_token_ids"]);
  EXPECT_EQ(ep.json["text"], single.json["text"]);
  ASSERT_EQ(ep.logits.size(), single.logits.size());
  const auto [mn, mx] = std::minmax_element(single.logits.begin(), single.logits.end());
  double max_diff = 0;
  for (size_t i = 0; i < ep.logits.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(ep.logits[i] - single.logits[i])));
  }
  EXPECT_LE(max_diff / (*mx - *mn), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, EpMpirunTest,
    ::testing::Values(Case{1, ""}, Case{2, ""}, Case{3, ""}, Case{4, ""}, Case{4, "--ranks-per-node 2"},
                      Case{4, "--ranks-per-node 2 --a2a-mode flat"}, Case{2, "--ep-overlap"},
                      Case{4, "--ep-overlap"}, Case{3, "--ranks-per-node 2 --ep-overlap"},
                      Case{2, "", "--capacity-factor 0.5"},
                      Case{4, "--ep-overlap", "--capacity-factor 0.75 --overflow-policy reroute"},
                      Case{4, "--ranks-per-node 2", "--capacity-factor 0.5 --overflow-policy drop"},
                      // DeepSeek-V3 (MLA, noaux_tc with 4 groups of 4 experts, top-2 groups): flat,
                      // hierarchical, node-limited to 2 nodes of one group each (the group
                      // limit already keeps every token on 2 groups: the output must not change).
                      Case{2, "", kDeepseek}, Case{4, "--ranks-per-node 2", kDeepseek},
                      Case{4, "--ranks-per-node 1 --max-nodes-per-token 2", kDeepseek},
                      Case{2, "--ep-overlap", kDeepseek},
                      // The hierarchical exchange with overlap (pipelined micro-batches).
                      Case{4, "--ranks-per-node 2 --a2a-mode hierarchical --ep-overlap"},
                      Case{4, "--ranks-per-node 2 --a2a-mode hierarchical --ep-overlap --ep-micro-batches 3"},
                      Case{4, "--ranks-per-node 2 --ep-overlap", kDeepseek}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = "np" + std::to_string(info.param.np);
      const bool deepseek = info.param.model_flags == kDeepseek;
      if (deepseek) name += "_deepseek_v3";
      for (char ch : info.param.flags + (deepseek ? std::string() : info.param.model_flags)) {
        name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      }
      return name;
    });

TEST(EpMpirun, DifferentModelFilesFailOnEveryRankWithoutHanging) {
  // Rank 1 gets a different model directory through an MPMD command line.
  const std::string other = testing::source_dir() + "/tests/data/models/random-mixtral-sharded";
  const std::string common = " generate --ep 2 --prompt hi --max-tokens 2 --threads 1";
  auto r = run_command("timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 " + moe_binary() + common +
                       " : -np 1 " + moe_binary() + common + " --model " + other);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "hung";
  EXPECT_NE(r.output.find("rank 0: rank 1 loaded a different model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: rank 1 loaded a different model"), std::string::npos) << r.output;
}

TEST(EpMpirun, EpWithoutMpirunIsAClearError) {
  auto r = run_command(moe_binary() + " generate --ep 2 --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("mpirun -np 2"), std::string::npos) << r.output;
}

TEST(EpMpirun, EpSizeMustMatchRanks) {
  auto r = run_command(mpirun(2) + moe_binary() + " generate --ep 3 --prompt hi --threads 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--ep 3 but mpirun started 2 ranks"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace moe
