// The YAML config file against the key table: values, lines and flag spellings of every
// seed key (expected values written by hand from the seed's file), and each error kind
// naming its key and line.
#include "moe/config/config_file.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

namespace moe::config {
namespace {

std::string error_of(const std::string& yaml) {
  auto r = parse_config(yaml, "c.yaml");
  return r.ok() ? std::string("(parsed)") : r.status().message();
}

bool has_warning(const ConfigFile& f, const std::string& key, const std::string& part) {
  for (const ConfigWarning& w : f.warnings) {
    if (w.key == key && w.message.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(ConfigKeys, TableIsConsistent) {
  std::set<std::string> keys;
  const std::set<std::string> sections = {"model", "parallelism", "expert_placement", "alltoall", "router",
                                          "profiling", "serving", "store", "fault_tolerance"};
  for (const ConfigKey& k : config_keys()) {
    EXPECT_TRUE(keys.insert(std::string(k.key)).second) << k.key;
    EXPECT_EQ(sections.count(std::string(k.key.substr(0, k.key.find('.')))), 1u) << k.key;
    EXPECT_TRUE(k.flag.empty() || k.flag.substr(0, 2) == "--") << k.key;
    // A key with no flag must say why (unhonoured) or be handled in config_checks.cc.
    if (k.flag.empty()) {
      const std::set<std::string> special = {"expert_placement.strategy", "router.type", "router.k"};
      EXPECT_TRUE(!k.unhonoured.empty() || special.count(std::string(k.key))) << k.key;
    }
  }
}

TEST(ConfigKeys, EditDistanceAndSuggestions) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("abc", "abc"), 0);
  EXPECT_EQ(closest_config_key("expert_placement.replicaton_cap"), "expert_placement.replication_cap");
  EXPECT_EQ(closest_config_key("router.replication_cap"), "expert_placement.replication_cap");
  EXPECT_EQ(closest_config_key("routr.k"), "router.k");
  EXPECT_EQ(closest_config_key("zzzzzzzzzzzzzzzzzzzzzzzzz.qqqqqqqqq"), "");
}

TEST(ConfigFile, ShippedSeedFileLoadsWithTheSeedsValues) {
  auto r = load_config_file(testing::source_dir() + "/configs/moe_inference_config.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ConfigFile& f = r.value();
  // key -> (value as in the seed, the flag's value)
  const std::vector<std::tuple<std::string, std::string, std::string>> expected = {
      {"expert_placement.strategy", "node_replicated", "32"},
      {"expert_placement.replication_cap", "4", "4"},
      {"expert_placement.hot_expert_threshold", "0.05", ""},
      {"alltoall.implementation", "custom_ibverbs", "mpi"},
      {"alltoall.pipeline_depth", "4", "true"},
      {"alltoall.crc_check", "false", ""},
      {"alltoall.inline_threshold", "4096", ""},
      {"alltoall.use_cuda_aware", "true", ""},
      {"router.type", "top_k", ""},
      {"router.k", "8", ""},
      {"router.adaptive_k", "true", "true"},
      {"router.min_k", "4", "4"},
      {"router.max_k", "8", "8"},
      {"router.capacity_factor", "1.25", "1.25"},
      {"router.token_drop_policy", "adaptive_requeue", "adaptive_requeue"},
      {"profiling.enable_nvtx", "true", ""},
      {"profiling.enable_nsight", "false", ""},
      {"profiling.comm_overlap_ratio_target", "0.85", ""},
      {"profiling.expert_utilization_target", "0.75", ""},
  };
  ASSERT_EQ(f.values.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [key, text, flag_value] = expected[i];
    EXPECT_EQ(f.values[i].key->key, key);
    EXPECT_EQ(f.values[i].text, text) << key;
    EXPECT_EQ(f.values[i].flag_value, flag_value) << key;
  }
  EXPECT_EQ(f.find("expert_placement.strategy")->flag, "--rebalance-every");
  EXPECT_EQ(f.find("router.min_k")->flag, "--min-k");
  EXPECT_EQ(f.find("router.token_drop_policy")->flag, "--overflow-policy");
  // Not honoured here, each with a warning; crc_check false and enable_nsight false match.
  for (const char* key : {"expert_placement.strategy", "expert_placement.hot_expert_threshold", "alltoall.implementation",
                          "alltoall.inline_threshold", "alltoall.use_cuda_aware",
                          "profiling.enable_nvtx", "profiling.comm_overlap_ratio_target",
                          "profiling.expert_utilization_target"}) {
    EXPECT_TRUE(has_warning(f, key, "")) << key;
  }
  EXPECT_FALSE(has_warning(f, "alltoall.crc_check", ""));
  EXPECT_FALSE(has_warning(f, "profiling.enable_nsight", ""));
  EXPECT_TRUE(has_warning(f, "alltoall.implementation", "using mpi"));
  EXPECT_EQ(f.find("alltoall.pipeline_depth")->extra_flag, "--ep-micro-batches");
  EXPECT_EQ(f.find("alltoall.pipeline_depth")->extra_flag_value, "4");
}

TEST(ConfigFile, PipelineDepthIsOverlapWithThatManyMicroBatches) {
  auto deep = parse_config("alltoall:\n  pipeline_depth: 12\n", "d.yaml");
  ASSERT_TRUE(deep.ok()) << deep.status().message();
  const ConfigValue* v = deep.value().find("alltoall.pipeline_depth");
  EXPECT_EQ(v->flag, "--ep-overlap");
  EXPECT_EQ(v->flag_value, "true");
  EXPECT_EQ(v->extra_flag, "--ep-micro-batches");
  EXPECT_EQ(v->extra_flag_value, "8");
  EXPECT_TRUE(has_warning(deep.value(), "alltoall.pipeline_depth", "at most 8 micro-batches"));
  auto two = parse_config("alltoall:\n  pipeline_depth: 2\n", "t.yaml");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two.value().find("alltoall.pipeline_depth")->extra_flag_value, "2");
  EXPECT_FALSE(has_warning(two.value(), "alltoall.pipeline_depth", ""));
}

TEST(ConfigFile, LinesAndSpellings) {
  auto r = parse_config("model:\n  path: /m\nparallelism:\n  fused_moe: false\n  ep: 2\n"
                        "alltoall:\n  pipeline_depth: 1\n  crc_check: true\n",
                        "c.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ConfigFile& f = r.value();
  EXPECT_EQ(f.find("model.path")->line, 2);
  EXPECT_EQ(f.find("model.path")->flag, "--model");
  EXPECT_EQ(f.find("parallelism.fused_moe")->flag_value, "off");
  EXPECT_EQ(f.find("parallelism.ep")->line, 5);
  EXPECT_EQ(f.find("alltoall.pipeline_depth")->flag_value, "false");
  EXPECT_EQ(f.find("alltoall.pipeline_depth")->extra_flag, "");
  EXPECT_TRUE(has_warning(f, "alltoall.crc_check", "no per-message CRC"));
  EXPECT_EQ(f.where(*f.find("parallelism.ep")), "c.yaml:5");
  // An empty file sets nothing.
  auto empty = parse_config("", "e.yaml");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty.value().values.empty());
}

TEST(ConfigFile, SyntaxErrorNamesLineAndColumn) {
  EXPECT_EQ(error_of("router:\n  k: [1, 2\n").substr(0, 9), "c.yaml:3:") << error_of("router:\n  k: [1, 2\n");
  EXPECT_NE(error_of("router:\n  k: [1, 2\n").find("YAML syntax error"), std::string::npos);
  EXPECT_NE(error_of("router:\n  k: 2\n   bad: : :\n").find("c.yaml:"), std::string::npos);
}

TEST(ConfigFile, UnknownKeysSuggestTheClosest) {
  EXPECT_EQ(error_of("expert_placement:\n  replicaton_cap: 2\n"),
            "c.yaml:2: expert_placement.replicaton_cap: unknown key (did you mean expert_placement.replication_cap?)");
  EXPECT_EQ(error_of("routr:\n  k: 2\n"), "c.yaml:2: routr.k: unknown key (did you mean router.k?)");
  EXPECT_EQ(error_of("router:\n  replication_cap: 2\n"),
            "c.yaml:2: router.replication_cap: unknown key (did you mean expert_placement.replication_cap?)");
  EXPECT_EQ(error_of("router:\n  k: 2\nk: 2\n"), "c.yaml:3: k: unknown top-level key (did you mean router.k?)");
  EXPECT_EQ(error_of("- a\n- b\n"), "c.yaml:1: expected a mapping of sections (model:, router:, ...) at the top level");
  EXPECT_EQ(error_of("router:\n  k: 2\n  k: 3\n"), "c.yaml:3: router.k: given twice");
}

TEST(ConfigFile, WrongTypes) {
  EXPECT_EQ(error_of("router:\n  k: eight\n"), "c.yaml:2: router.k: expected an integer, got 'eight'");
  EXPECT_EQ(error_of("router:\n  k: 2.5\n"), "c.yaml:2: router.k: expected an integer, got '2.5'");
  EXPECT_EQ(error_of("router:\n  adaptive_k: maybe\n"),
            "c.yaml:2: router.adaptive_k: expected a boolean (true or false), got 'maybe'");
  EXPECT_EQ(error_of("router:\n  capacity_factor: [1, 2]\n"),
            "c.yaml:2: router.capacity_factor: expected a number, got a list");
  EXPECT_EQ(error_of("router:\n  token_drop_policy: requeue\n"),
            "c.yaml:2: router.token_drop_policy: 'requeue' is not one of dropless, drop, reroute, adaptive_requeue");
  EXPECT_EQ(error_of("router:\n  k:\n"), "c.yaml:2: router.k: has no value");
  EXPECT_EQ(error_of("router: 3\n"), "c.yaml:1: router: expected a section (a mapping of keys)");
}

TEST(ConfigFile, OutOfRange) {
  EXPECT_EQ(error_of("expert_placement:\n  replication_cap: 0\n"),
            "c.yaml:2: expert_placement.replication_cap: must be >= 1 (got 0)");
  EXPECT_EQ(error_of("profiling:\n  comm_overlap_ratio_target: 1.5\n"),
            "c.yaml:2: profiling.comm_overlap_ratio_target: must be in [0, 1] (got 1.5)");
  EXPECT_EQ(error_of("router:\n  capacity_factor: 0\n"), "c.yaml:2: router.capacity_factor: must be > 0 (got 0)");
  EXPECT_EQ(error_of("serving:\n  port: 70000\n"), "c.yaml:2: serving.port: must be in [0, 65535] (got 70000)");
}

TEST(ConfigFile, Contradictions) {
  EXPECT_EQ(error_of("router:\n  adaptive_k: true\n  min_k: 8\n  max_k: 4\n"),
            "c.yaml:3: router.min_k: 8 is greater than router.max_k (4, line 4)");
  EXPECT_EQ(error_of("router:\n  adaptive_k: true\n  min_k: 2\n  max_k: 2\n"),
            "c.yaml:2: router.adaptive_k: true with router.min_k == router.max_k (2) is a fixed-k router; set "
            "adaptive_k: false or min_k < max_k");
  EXPECT_EQ(error_of("router:\n  adaptive_k: false\n  min_k: 1\n"),
            "c.yaml:3: router.min_k: applies to adaptive top-k only; set router.adaptive_k: true (it is false, line 2)");
  EXPECT_EQ(error_of("router:\n  k: 2\n  adaptive_k: true\n  min_k: 1\n  max_k: 4\n"),
            "c.yaml:5: router.max_k: 4 exceeds router.k (2, line 2)");
  EXPECT_EQ(error_of("router:\n  capacity_factor: 1.5\n  token_drop_policy: dropless\n"),
            "c.yaml:2: router.capacity_factor: has no effect with router.token_drop_policy dropless (line 3); use drop, "
            "reroute or adaptive_requeue");
  EXPECT_EQ(error_of("expert_placement:\n  strategy: plan_file\n"),
            "c.yaml:2: expert_placement.strategy: plan_file needs expert_placement.plan_file");
  EXPECT_EQ(error_of("expert_placement:\n  strategy: contiguous\n  plan_file: p.json\n"),
            "c.yaml:2: expert_placement.strategy: contiguous contradicts expert_placement.plan_file (line 3); use "
            "strategy: plan_file");
  EXPECT_EQ(error_of("expert_placement:\n  strategy: node_replicated\n  rebalance_every: 0\n"),
            "c.yaml:2: expert_placement.strategy: node_replicated needs live rebalancing, but "
            "expert_placement.rebalance_every is 0 (line 3)");
  EXPECT_EQ(error_of("model:\n  path: a\nstore:\n  path: b\n"),
            "c.yaml:4: store.path: both model.path (line 2) and store.path name the model; give one");
}

TEST(ConfigFile, MissingFileIsNotFound) {
  auto r = load_config_file("/nonexistent/c.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/c.yaml"), std::string::npos);
}

}  // namespace
}  // namespace moe::config
