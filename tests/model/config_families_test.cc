// Config parsing per family: Qwen2-MoE, Qwen3-MoE and DeepSeek-V3 configs parse to
// exact values (layer kinds, router, shared expert); invalid router fields are rejected
// with a message naming the field.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "moe/model/config.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::read_file;
using testing::source_dir;

constexpr const char* kSource = "/models/x/config.json";

json load_json(const std::string& path) { return json::parse(read_file(path)); }
json qwen2() { return load_json(source_dir() + "/tests/data/models/random-qwen2-moe/config.json"); }
json qwen3() { return load_json(source_dir() + "/tests/data/models/random-qwen3-moe/config.json"); }
json deepseek() { return load_json(source_dir() + "/tests/data/configs/tiny-deepseek-v3.json"); }

void expect_error(const json& j, std::initializer_list<std::string> needles,
                  StatusCode code = StatusCode::kInvalidArgument) {
  auto c = parse_model_config(j.dump(), kSource);
  ASSERT_FALSE(c.ok()) << "accepted: " << j.dump();
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_CONTAINS(c.status().message(), kSource);
  for (const auto& n : needles) EXPECT_CONTAINS(c.status().message(), n);
}

ModelConfig parse_ok(const json& j) {
  auto c = parse_model_config(j.dump(), kSource);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

TEST(ConfigFamiliesTest, Qwen2Moe) {
  const ModelConfig c = parse_ok(qwen2());
  EXPECT_EQ(c.family, ModelFamily::kQwen2Moe);
  EXPECT_EQ(c.router.num_experts, 8);
  EXPECT_EQ(c.router.top_k, 4);
  EXPECT_FALSE(c.router.norm_topk_prob);
  EXPECT_EQ(c.router.scoring, RouterConfig::Scoring::kSoftmax);
  EXPECT_EQ(c.router.topk_method, RouterConfig::TopkMethod::kGreedy);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.shared_expert_intermediate_size, 48);
  EXPECT_TRUE(c.shared_expert_gate);
  EXPECT_TRUE(c.attention_qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.moe_layer, (std::vector<bool>{true, false, true}));  // mlp_only_layers [1]
  EXPECT_EQ(c.num_moe_layers(), 2);
  EXPECT_EQ(c.max_position_embeddings, 512);  // use_sliding_window false: window ignored
}

TEST(ConfigFamiliesTest, Qwen3Moe) {
  const ModelConfig c = parse_ok(qwen3());
  EXPECT_EQ(c.family, ModelFamily::kQwen3Moe);
  EXPECT_EQ(c.router.num_experts, 8);
  EXPECT_EQ(c.router.top_k, 2);
  EXPECT_TRUE(c.router.norm_topk_prob);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_qkv_bias);
  EXPECT_EQ(c.shared_expert_intermediate_size, 0);
  EXPECT_EQ(c.moe_layer, (std::vector<bool>{false, true, false, true}));  // decoder_sparse_step 2
}

TEST(ConfigFamiliesTest, Qwen3NormTopkProbDefaultsToFalse) {
  json j = qwen3();
  j.erase("norm_topk_prob");
  EXPECT_FALSE(parse_ok(j).router.norm_topk_prob);
}

TEST(ConfigFamiliesTest, SparseStepAndMlpOnlyLayersCombine) {
  json j = qwen3();
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  EXPECT_EQ(parse_ok(j).moe_layer, (std::vector<bool>{false, true, false, false, false, true}));
}

TEST(ConfigFamiliesTest, DeepseekV3RouterAndLayers) {
  const ModelConfig c = parse_ok(deepseek());
  EXPECT_EQ(c.family, ModelFamily::kDeepseekV3);
  EXPECT_EQ(c.router.scoring, RouterConfig::Scoring::kSigmoid);
  EXPECT_EQ(c.router.topk_method, RouterConfig::TopkMethod::kNoauxTc);
  EXPECT_TRUE(c.router.has_score_bias());
  EXPECT_EQ(c.router.num_experts, 16);
  EXPECT_EQ(c.router.top_k, 4);
  EXPECT_EQ(c.router.n_group, 4);
  EXPECT_EQ(c.router.topk_group, 2);
  EXPECT_TRUE(c.router.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.router.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.moe_intermediate_size, 64);
  EXPECT_EQ(c.shared_expert_intermediate_size, 64);  // 1 shared expert
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_EQ(c.moe_layer, (std::vector<bool>{false, true, true, true}));  // first_k_dense_replace 1
}

TEST(ConfigFamiliesTest, RealPublishedConfigs) {
  const std::string dir = moe::testing::shared_data_dir() + "/model_configs";
  MOE_SKIP_IF_MISSING(dir);
  {
    const ModelConfig c = parse_ok(load_json(dir + "/qwen3-30b-a3b.json"));
    EXPECT_EQ(c.router.num_experts, 128);
    EXPECT_EQ(c.router.top_k, 8);
    EXPECT_EQ(c.moe_intermediate_size, 768);
    EXPECT_EQ(c.num_moe_layers(), 48);
  }
  {
    const ModelConfig c = parse_ok(load_json(dir + "/qwen2-57b-a14b.json"));
    EXPECT_EQ(c.router.num_experts, 64);
    EXPECT_EQ(c.shared_expert_intermediate_size, 20480);
  }
  {
    // DeepSeek-V3 uses YaRN rope scaling, which we do not implement yet: a clear error.
    auto c = parse_model_config(read_file(dir + "/deepseek-v3.json"), "deepseek-v3.json");
    ASSERT_FALSE(c.ok());
    EXPECT_CONTAINS(c.status().message(), "rope_scaling");
  }
}

TEST(ConfigFamiliesTest, TopKAboveNumExperts) {
  json j = qwen3();
  j["num_experts_per_tok"] = 9;
  expect_error(j, {"num_experts_per_tok 9", "num_experts 8"});
  json d = deepseek();
  d["num_experts_per_tok"] = 17;
  expect_error(d, {"num_experts_per_tok 17", "n_routed_experts 16"});
}

TEST(ConfigFamiliesTest, NGroupMustDivideExperts) {
  json d = deepseek();
  d["n_group"] = 3;
  expect_error(d, {"n_group 3", "n_routed_experts 16"});
}

TEST(ConfigFamiliesTest, TopkGroupAboveNGroup) {
  json d = deepseek();
  d["topk_group"] = 5;
  expect_error(d, {"topk_group 5", "n_group 4"});
}

TEST(ConfigFamiliesTest, KeptGroupsTooSmallForTopK) {
  json d = deepseek();
  d["topk_group"] = 1;  // 1 group of 4 experts, top-4: fine
  parse_ok(d);
  d["num_experts_per_tok"] = 5;
  expect_error(d, {"topk_group 1", "num_experts_per_tok 5"});
}

TEST(ConfigFamiliesTest, UnknownScoringFuncAndTopkMethod) {
  json d = deepseek();
  d["scoring_func"] = "tanh";
  expect_error(d, {"'scoring_func'", "tanh", "sigmoid"});
  d = deepseek();
  d["topk_method"] = "magic";
  expect_error(d, {"'topk_method'", "magic", "noaux_tc"});
  d = deepseek();
  d["scoring_func"] = 3;
  expect_error(d, {"'scoring_func'"});
}

TEST(ConfigFamiliesTest, BadRoutedScalingFactorAndMlpOnlyLayers) {
  json d = deepseek();
  d["routed_scaling_factor"] = -1;
  expect_error(d, {"'routed_scaling_factor'"});
  json j = qwen2();
  j["mlp_only_layers"] = {7};
  expect_error(j, {"'mlp_only_layers'"});
  j["mlp_only_layers"] = "1";
  expect_error(j, {"'mlp_only_layers'"});
  j = qwen2();
  j.erase("moe_intermediate_size");
  expect_error(j, {"'moe_intermediate_size'"});
}

}  // namespace
}  // namespace moe
