// Shard grouping with real tensor names of each family, and the structure fingerprint.
#include "moe/store/shard_grouping.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace moe {
namespace {

struct Case {
  const char* name;
  ShardKind kind;
  int layer;
  int expert;
  const char* id;
};

void check(ModelFamily family, const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    ShardKey k = shard_key_for(c.name, family);
    EXPECT_EQ(k.kind, c.kind) << c.name;
    EXPECT_EQ(k.layer, c.layer) << c.name;
    EXPECT_EQ(k.expert, c.expert) << c.name;
    EXPECT_EQ(k.id(), c.id) << c.name;
  }
}

constexpr ShardKind E = ShardKind::kExpert;
constexpr ShardKind L = ShardKind::kLayer;
constexpr ShardKind M = ShardKind::kModel;

TEST(ShardGroupingTest, Mixtral) {
  check(ModelFamily::kMixtral,
        {{"model.layers.3.block_sparse_moe.experts.5.w1.weight", E, 3, 5, "layer.3.expert.5"},
         {"model.layers.3.block_sparse_moe.experts.5.w2.weight", E, 3, 5, "layer.3.expert.5"},
         {"model.layers.31.block_sparse_moe.experts.7.w3.weight", E, 31, 7, "layer.31.expert.7"},
         {"model.layers.3.block_sparse_moe.gate.weight", L, 3, -1, "layer.3"},
         {"model.layers.3.self_attn.q_proj.weight", L, 3, -1, "layer.3"},
         {"model.layers.10.input_layernorm.weight", L, 10, -1, "layer.10"},
         {"model.embed_tokens.weight", M, -1, -1, "model"},
         {"model.norm.weight", M, -1, -1, "model"},
         {"lm_head.weight", M, -1, -1, "model"}});
}

TEST(ShardGroupingTest, Qwen) {
  for (ModelFamily f : {ModelFamily::kQwen2Moe, ModelFamily::kQwen3Moe}) {
    check(f, {{"model.layers.2.mlp.experts.7.gate_proj.weight", E, 2, 7, "layer.2.expert.7"},
              {"model.layers.2.mlp.experts.59.down_proj.weight", E, 2, 59, "layer.2.expert.59"},
              {"model.layers.2.mlp.shared_expert.gate_proj.weight", L, 2, -1, "layer.2"},
              {"model.layers.2.mlp.shared_expert_gate.weight", L, 2, -1, "layer.2"},
              {"model.layers.2.mlp.gate.weight", L, 2, -1, "layer.2"},
              {"model.layers.2.self_attn.q_norm.weight", L, 2, -1, "layer.2"},
              {"model.embed_tokens.weight", M, -1, -1, "model"},
              {"lm_head.weight", M, -1, -1, "model"}});
  }
}

TEST(ShardGroupingTest, DeepseekV3) {
  check(ModelFamily::kDeepseekV3,
        {{"model.layers.5.mlp.experts.5.down_proj.weight", E, 5, 5, "layer.5.expert.5"},
         {"model.layers.5.mlp.experts.5.down_proj.weight_scale_inv", E, 5, 5, "layer.5.expert.5"},
         {"model.layers.60.mlp.experts.255.up_proj.weight", E, 60, 255, "layer.60.expert.255"},
         {"model.layers.5.mlp.shared_experts.gate_proj.weight", L, 5, -1, "layer.5"},
         {"model.layers.5.mlp.shared_experts.gate_proj.weight_scale_inv", L, 5, -1, "layer.5"},
         {"model.layers.5.mlp.gate.e_score_correction_bias", L, 5, -1, "layer.5"},
         {"model.layers.0.mlp.down_proj.weight", L, 0, -1, "layer.0"},  // dense layer
         {"model.layers.5.self_attn.kv_a_proj_with_mqa.weight", L, 5, -1, "layer.5"},
         {"model.embed_tokens.weight", M, -1, -1, "model"},
         {"model.norm.weight", M, -1, -1, "model"},
         {"lm_head.weight", M, -1, -1, "model"}});
}

TEST(ShardGroupingTest, OddNamesGoToTheModelShard) {
  check(ModelFamily::kMixtral, {{"model.layers.x.foo", M, -1, -1, "model"},
                                {"model.layers.", M, -1, -1, "model"},
                                {"model.layers.3", M, -1, -1, "model"},
                                {"model.layers.3.block_sparse_moe.experts.x.w1.weight", L, 3, -1, "layer.3"},
                                {"xmodel.layers.3.self_attn.q_proj.weight", M, -1, -1, "model"}});
}

std::vector<TensorInfo> sample_tensors() {
  return {{"model.embed_tokens.weight", "BF16", {32000, 64}, 32000 * 64 * 2},
          {"model.layers.0.block_sparse_moe.experts.0.w1.weight", "BF16", {128, 64}, 128 * 64 * 2},
          {"model.layers.0.input_layernorm.weight", "BF16", {64}, 128},
          {"lm_head.weight", "BF16", {32000, 64}, 32000 * 64 * 2}};
}

TEST(ShardGroupingTest, FingerprintIsStructural) {
  const auto base = sample_tensors();
  const Hash128 h = model_structure_fingerprint("mixtral", base);
  auto shuffled = base;
  std::reverse(shuffled.begin(), shuffled.end());
  EXPECT_EQ(model_structure_fingerprint("mixtral", shuffled), h);
  auto other_bytes = base;
  other_bytes[0].nbytes += 2;  // values/size aside, only names/dtypes/shapes count
  EXPECT_EQ(model_structure_fingerprint("mixtral", other_bytes), h);

  auto shape = base;
  shape[1].shape = {256, 64};
  EXPECT_NE(model_structure_fingerprint("mixtral", shape), h);
  auto rank = base;
  rank[2].shape = {64, 1};
  EXPECT_NE(model_structure_fingerprint("mixtral", rank), h);
  auto dtype = base;
  dtype[2].dtype_name = "F32";
  EXPECT_NE(model_structure_fingerprint("mixtral", dtype), h);
  auto name = base;
  name[2].name = "model.layers.0.post_attention_layernorm.weight";
  EXPECT_NE(model_structure_fingerprint("mixtral", name), h);
  auto fewer = base;
  fewer.pop_back();
  EXPECT_NE(model_structure_fingerprint("mixtral", fewer), h);
  EXPECT_NE(model_structure_fingerprint("qwen2_moe", base), h);
}

}  // namespace
}  // namespace moe
