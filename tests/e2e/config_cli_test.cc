// `--config FILE.yaml` end to end: a file's values reach the engine exactly as the flags
// they stand for (same logits as the flags), flags override the file, `moe config show`
// reports each value's origin, and bad files are refused naming key and line (exit 2).
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "generate_run.h"
#include "test_util.h"

namespace moe::testing {
namespace {

std::string write_config(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  write_file(path, text);
  return path;
}

GenRun generate(const std::string& dir, const std::string& tag, const std::string& extra) {
  const std::string logits = dir + "/" + tag + ".f32";
  const CommandResult r = run_command(moe_binary() + " generate --model " + tiny_model_dir() +
                                      " --prompt 'ROMEO:' --max-tokens 4 --temperature 0 --threads 1 --format json "
                                      "--logits-out " + logits + " " + extra);
  return parse_generate_run(r, logits);
}

TEST(ConfigCli, FileValuesActLikeTheirFlags) {
  const std::string dir = make_temp_dir("config_cli");
  const std::string cfg = write_config(dir, "c.yaml",
                                       "router:\n  capacity_factor: 0.25\n  token_drop_policy: drop\n"
                                       "parallelism:\n  threads: 1\n");
  const GenRun flags = generate(dir, "flags", "--capacity-factor 0.25 --overflow-policy drop");
  const GenRun file = generate(dir, "file", "--config " + cfg);
  const GenRun dropless = generate(dir, "dropless", "");
  ASSERT_EQ(flags.exit_code, 0) << flags.output;
  ASSERT_EQ(file.exit_code, 0) << file.output;
  ASSERT_EQ(dropless.exit_code, 0) << dropless.output;
  ASSERT_FALSE(flags.logits.empty());
  EXPECT_EQ(file.logits, flags.logits);  // bit for bit: the same options reached the engine
  EXPECT_EQ(file.json["output_token_ids"], flags.json["output_token_ids"]);
  EXPECT_NE(dropless.logits, flags.logits);  // and they mattered (capacity 0.25 drops tokens)
}

TEST(ConfigCli, PipelineDepthSetsOverlapAndMicroBatchesUnlessFlagsOverride) {
  const std::string dir = make_temp_dir("config_depth");
  const std::string cfg = write_config(dir, "c.yaml", "alltoall:\n  pipeline_depth: 3\n");
  const GenRun file = generate(dir, "file", "--config " + cfg);
  ASSERT_EQ(file.exit_code, 0) << file.output;
  // --ep-overlap=false on the command line drops the file's --ep-micro-batches 3 with it
  // (else the engine refuses micro-batches without overlap).
  const GenRun off = generate(dir, "off", "--config " + cfg + " --ep-overlap=false");
  ASSERT_EQ(off.exit_code, 0) << off.output;
  // The file's micro-batch count reached the engine: 3 is accepted, and a flag overrides it.
  const GenRun bad = generate(dir, "bad", "--config " + cfg + " --ep-micro-batches 9");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_CONTAINS(bad.output, "--ep-micro-batches 9 must be 0 (auto) or 2..8");
  const GenRun deep = generate(dir, "deep", "--config " + write_config(dir, "d.yaml", "alltoall:\n  pipeline_depth: 12\n"));
  ASSERT_EQ(deep.exit_code, 0) << deep.output;
  EXPECT_CONTAINS(deep.output, "at most 8 micro-batches");
}

TEST(ConfigCli, ShowPrintsOriginsAndFlagsOverride) {
  const std::string dir = make_temp_dir("config_show");
  const std::string cfg = write_config(dir, "c.yaml",
                                       "parallelism:\n  threads: 3\n  ep: 1\nserving:\n  port: 9123\n"
                                       "alltoall:\n  use_cuda_aware: true\n");
  const CommandResult r =
      run_command(moe_binary() + " config show --json --config " + cfg + " --threads 2 --max-num-seqs 7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  std::map<std::string, nlohmann::json> by_key;
  for (const auto& k : j["keys"]) by_key[k["key"]] = k;
  EXPECT_EQ(by_key["parallelism.threads"]["value"], "2");
  EXPECT_EQ(by_key["parallelism.threads"]["origin"], "flag");
  EXPECT_EQ(by_key["serving.port"]["value"], "9123");
  EXPECT_EQ(by_key["serving.port"]["origin"], cfg + ":5");
  EXPECT_EQ(by_key["parallelism.ep"]["origin"], cfg + ":3");
  EXPECT_EQ(by_key["serving.max_num_seqs"]["value"], "7");
  EXPECT_EQ(by_key["serving.max_num_seqs"]["origin"], "flag");
  EXPECT_EQ(by_key["serving.kv_block_size"]["value"], "16");
  EXPECT_EQ(by_key["serving.kv_block_size"]["origin"], "default");
  EXPECT_EQ(by_key["alltoall.use_cuda_aware"]["origin"], cfg + ":7");
  ASSERT_EQ(j["warnings"].size(), 1u);
  EXPECT_CONTAINS(j["warnings"][0].get<std::string>(), cfg + ":7: alltoall.use_cuda_aware: this build runs on CPUs");
  // The table form names the same.
  const CommandResult t = run_command(moe_binary() + " config show --config " + cfg);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_CONTAINS(t.output, "serving.port");
  EXPECT_CONTAINS(t.output, cfg + ":5");
}

TEST(ConfigCli, ShippedSeedConfigShowsEveryKey) {
  const std::string cfg = source_dir() + "/configs/moe_inference_config.yaml";
  const CommandResult r = run_command(moe_binary() + " config show --json --config " + cfg);
  // Before the adaptive top-k flags exist, router.adaptive_k/min_k/max_k
  // show as "not in this build" and token_drop_policy adaptive_requeue is refused by
  // --overflow-policy; after, the file applies (router.k 8 against the shipped model's 2:
  // a warning here, an error when a command launches).
  if (r.exit_code != 0) {
    EXPECT_CONTAINS(r.output, "router.token_drop_policy");
    EXPECT_CONTAINS(r.output, ":31:");
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  std::map<std::string, nlohmann::json> by_key;
  for (const auto& k : j["keys"]) by_key[k["key"]] = k;
  EXPECT_EQ(by_key["expert_placement.replication_cap"]["value"], "4");
  EXPECT_EQ(by_key["router.capacity_factor"]["value"], "1.25");
  EXPECT_EQ(by_key["expert_placement.rebalance_every"]["value"], "32");
  EXPECT_CONTAINS(j["warnings"].dump(), "router.k: 8 but the model");
}

TEST(ConfigCli, BadFilesNameKeyAndLine) {
  const std::string dir = make_temp_dir("config_bad");
  struct Case {
    std::string yaml, expected;
  };
  const std::vector<Case> cases = {
      {"router:\n  capacity_factr: 1.5\n", ":2: router.capacity_factr: unknown key (did you mean router.capacity_factor?)"},
      {"router:\n  min_k: 3\n  max_k: 2\n  adaptive_k: true\n", ":2: router.min_k: 3 is greater than router.max_k (2, line 3)"},
      {"expert_placement:\n  replication_cap: 0\n", ":2: expert_placement.replication_cap: must be >= 1 (got 0)"},
      {"parallelism:\n  threads: many\n", ":2: parallelism.threads: expected an integer, got 'many'"},
      {"parallelism:\n  threads: 1\n bad\n", "YAML syntax error"},
      // router.k against the model's num_experts_per_tok (2 for the shipped model).
      {"model:\n  fp8: dequant\nrouter:\n  k: 8\n", ":4: router.k: 8 but the model"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string cfg = write_config(dir, "bad" + std::to_string(i) + ".yaml", cases[i].yaml);
    const CommandResult r =
        run_command(moe_binary() + " generate --prompt x --max-tokens 1 --threads 1 --config " + cfg);
    EXPECT_EQ(r.exit_code, 2) << cases[i].yaml << r.output;
    EXPECT_CONTAINS(r.output, cases[i].expected);
  }
  const CommandResult missing = run_command(moe_binary() + " generate --prompt x --config " + dir + "/none.yaml");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_CONTAINS(missing.output, dir + "/none.yaml");
}

TEST(ConfigCli, KeysAGivenCommandDoesNotTakeAreNamed) {
  const std::string dir = make_temp_dir("config_scope");
  // serving.port on generate: a warning (generate serves nothing), generation still runs.
  const std::string cfg = write_config(dir, "c.yaml", "serving:\n  port: 9000\n");
  const GenRun r = generate(dir, "scope", "--config " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "warning: " + cfg + ":2: serving.port: not used by `moe generate` (it has no --port)");
}

TEST(ConfigCli, NewSubcommandsHaveHelp) {
  for (const auto& [cmd, flags] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"config show", {"--config", "--json"}},
           {"doctor", {"--hosts", "--np", "--model", "--config", "--port", "--profile", "Exit status"}},
           {"deploy k8s", {"--config", "--out", "--ranks-per-pod", "--image"}},
           {"serve", {"--config"}},
           {"bench batch", {"--config"}}}) {
    const CommandResult r = run_command(moe_binary() + " " + cmd + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd << r.output;
    for (const std::string& flag : flags) EXPECT_CONTAINS(r.output, flag);
  }
}

}  // namespace
}  // namespace moe::testing
