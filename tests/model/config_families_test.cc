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
    const ModelConfig c = parse_ok(load_json(dir + "/deepseek-v3.json"));
    EXPECT_EQ(c.family, ModelFamily::kDeepseekV3);
    EXPECT_EQ(c.mla.q_lora_rank, 1536);
    EXPECT_EQ(c.mla.kv_lora_rank, 512);
    EXPECT_EQ(c.head_dim, 192);
    EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
    EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 40);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
    EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 1.0);
    EXPECT_TRUE(c.fp8.enabled);
    EXPECT_EQ(c.fp8.block_rows, 128);
    EXPECT_EQ(c.fp8.block_cols, 128);
    EXPECT_EQ(c.num_moe_layers(), 58);  // first_k_dense_replace 3 of 61
    EXPECT_TRUE(c.rope_interleave);
  }
  {
    const ModelConfig c = parse_ok(load_json(dir + "/deepseek-r1.json"));
    EXPECT_EQ(c.router.n_group, 8);
    EXPECT_EQ(c.router.topk_group, 4);
  }
  {
    const ModelConfig c = parse_ok(load_json(dir + "/deepseek-v2-lite.json"));
    EXPECT_EQ(c.family, ModelFamily::kDeepseekV2);
    EXPECT_EQ(c.mla.q_lora_rank, 0);  // null: a direct q_proj
    EXPECT_EQ(c.router.scoring, RouterConfig::Scoring::kSoftmax);
    EXPECT_EQ(c.router.topk_method, RouterConfig::TopkMethod::kGreedy);
    EXPECT_FALSE(c.router.norm_topk_prob);
    EXPECT_EQ(c.shared_expert_intermediate_size, 2 * 1408);
    EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 0.707);
    EXPECT_FALSE(c.fp8.enabled);
  }
  {
    const ModelConfig c = parse_ok(load_json(dir + "/kimi-k2-instruct.json"));
    EXPECT_EQ(c.family, ModelFamily::kDeepseekV3);  // model_type kimi_k2: the deepseek_v3 architecture
    EXPECT_EQ(c.router.num_experts, 384);
    EXPECT_EQ(c.router.n_group, 1);
    EXPECT_DOUBLE_EQ(c.router.routed_scaling_factor, 2.827);
    EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 1.0);
    EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  }
}

TEST(ConfigFamiliesTest, MlaFields) {
  const ModelConfig c = parse_ok(deepseek());
  EXPECT_TRUE(c.mla.enabled());
  EXPECT_EQ(c.mla.q_lora_rank, 64);
  EXPECT_EQ(c.mla.kv_lora_rank, 32);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 32);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 16);
  EXPECT_EQ(c.mla.v_head_dim, 32);
  EXPECT_EQ(c.head_dim, 48);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c.fp8.enabled);
  json d = deepseek();
  d["qk_rope_head_dim"] = 15;
  expect_error(d, {"'qk_rope_head_dim'", "15", "even"});
  d = deepseek();
  d.erase("kv_lora_rank");
  expect_error(d, {"'kv_lora_rank'"});
  d = deepseek();
  d["q_lora_rank"] = nullptr;
  EXPECT_EQ(parse_ok(d).mla.q_lora_rank, 0);
  d["model_type"] = "deepseek_v2";
  EXPECT_EQ(parse_ok(d).family, ModelFamily::kDeepseekV2);
}

TEST(ConfigFamiliesTest, RopeScalingTypes) {
  json d = deepseek();
  d["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  ModelConfig c = parse_ok(d);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  d["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}};  // transformers' newer key
  c = parse_ok(d);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 512);  // defaults to max_position_embeddings
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1);
  json q = qwen3();
  q["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expect_error(q, {"rope_scaling type 'dynamic'", "yarn"}, StatusCode::kUnimplemented);
  q["rope_scaling"] = {{"type", "longrope"}, {"factor", 2.0}};
  expect_error(q, {"'longrope'"}, StatusCode::kUnimplemented);
  q["rope_scaling"] = {{"type", "yarn"}};
  expect_error(q, {"'factor'"});
  q["rope_scaling"] = {{"type", "yarn"}, {"factor", 0.5}};
  expect_error(q, {"'factor'", "0.5"});
  q["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}, {"beta_fast", "x"}};
  expect_error(q, {"'beta_fast'"});
}

TEST(ConfigFamiliesTest, Fp8QuantizationConfig) {
  json d = deepseek();
  d["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {32, 16}},
                              {"activation_scheme", "dynamic"}};
  ModelConfig c = parse_ok(d);
  EXPECT_TRUE(c.fp8.enabled);
  EXPECT_EQ(c.fp8.block_rows, 32);
  EXPECT_EQ(c.fp8.block_cols, 16);
  d["quantization_config"]["fmt"] = "e5m2";
  expect_error(d, {"fmt 'e5m2'"}, StatusCode::kUnimplemented);
  d["quantization_config"]["fmt"] = "e4m3";
  d["quantization_config"]["weight_block_size"] = {128};
  expect_error(d, {"'weight_block_size'"});
  d["quantization_config"] = {{"quant_method", "awq"}};
  expect_error(d, {"quant_method 'awq'"}, StatusCode::kUnimplemented);
  d["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "static"}};
  expect_error(d, {"activation_scheme 'static'"}, StatusCode::kUnimplemented);
}

TEST(ConfigFamiliesTest, KimiK2IsTheDeepseekV3Architecture) {
  json d = deepseek();
  d["model_type"] = "kimi_k2";
  d["n_group"] = 1;
  d["topk_group"] = 1;
  const ModelConfig c = parse_ok(d);
  EXPECT_EQ(c.family, ModelFamily::kDeepseekV3);
  EXPECT_EQ(c.router.n_group, 1);
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
