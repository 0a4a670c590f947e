// Multi-head latent attention weights (bind_weights on copies of
// models/tiny-deepseek-v3-shakespeare whose config disagrees with the tensors): the error
// names the tensor, both shapes and the config fields that imply the expected one; the
// unmodified copy binds with the MLA shapes.
#include "moe/model/weights.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "moe/engine.h"
#include "moe/model/hf_checkpoint.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using moe::testing::copy_model_dir;
using moe::testing::read_json;
using moe::testing::ScopedTempDir;
using moe::testing::write_json;

class MlaWeightsTest : public ::testing::Test {
 protected:
  void SetUp() override { copy_model_dir(testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare", dir_.path()); }

  void set_config(const std::string& field, const json& value) {
    json c = read_json(dir_.file("config.json"));
    c[field] = value;
    write_json(dir_.file("config.json"), c);
  }

  StatusOr<ModelWeights> bind() {
    auto config = load_model_config(dir_.path());
    if (!config.ok()) return config.status();
    auto ckpt = HfCheckpoint::open(dir_.path());
    if (!ckpt.ok()) return ckpt.status();
    ckpt_ = std::make_unique<HfCheckpoint>(std::move(ckpt).value());
    return bind_weights(config.value(), *ckpt_);
  }

  ScopedTempDir dir_{"mla-weights"};
  std::unique_ptr<HfCheckpoint> ckpt_;
};

TEST_F(MlaWeightsTest, UnmodifiedCopyBindsTheMlaShapes) {
  auto w = bind();
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const MlaWeights& a = w->layers[2].mla;
  EXPECT_EQ(a.q_a_proj.rows, 64);
  EXPECT_EQ(a.q_b_proj.rows, 4 * 48);
  EXPECT_EQ(a.q_proj.data, nullptr);  // q_lora_rank set: no direct q_proj
  EXPECT_EQ(a.kv_a_proj.rows, 32 + 16);
  EXPECT_EQ(a.kv_b_proj.rows, 4 * (32 + 32));
  EXPECT_EQ(a.kv_b_proj.cols, 32);
  EXPECT_EQ(a.q_a_norm.size(), 64u);
  EXPECT_EQ(a.kv_a_norm.size(), 32u);
  EXPECT_EQ(w->layers[2].o_proj.cols, 4 * 32);
  EXPECT_EQ(w->layers[2].q_proj.data, nullptr);  // no GQA tensors
}

TEST_F(MlaWeightsTest, KvLoraRankMismatchNamesTheTensorAndTheField) {
  set_config("kv_lora_rank", 24);
  auto w = bind();
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = w.status().message();
  EXPECT_CONTAINS(m, "'model.layers.0.self_attn.kv_a_proj_with_mqa.weight'");
  EXPECT_CONTAINS(m, "has shape [48, 128]");
  EXPECT_CONTAINS(m, "config.json implies [40, 128]");
  EXPECT_CONTAINS(m, "kv_lora_rank 24");
}

TEST_F(MlaWeightsTest, QLoraRankNullNeedsADirectQProj) {
  set_config("q_lora_rank", nullptr);  // DeepSeek-V2-Lite style, but the files hold q_a/q_b
  auto w = bind();
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(w.status().message(), "model.layers.0.self_attn.q_proj.weight");
}

TEST_F(MlaWeightsTest, VHeadDimMismatchNamesKvBProjAndTheFields) {
  set_config("v_head_dim", 16);
  auto w = bind();
  ASSERT_FALSE(w.ok());
  const std::string& m = w.status().message();
  EXPECT_CONTAINS(m, "'model.layers.0.self_attn.kv_b_proj.weight'");
  EXPECT_CONTAINS(m, "v_head_dim 16");
}

TEST_F(MlaWeightsTest, EngineOpenReportsTheMismatch) {
  set_config("qk_rope_head_dim", 8);
  auto engine = Engine::open({.model_dir = dir_.path()});
  ASSERT_FALSE(engine.ok());
  EXPECT_CONTAINS(engine.status().message(), "qk_rope_head_dim 8");
  set_config("qk_rope_head_dim", 15);
  engine = Engine::open({.model_dir = dir_.path()});
  ASSERT_FALSE(engine.ok());
  EXPECT_CONTAINS(engine.status().message(), "'qk_rope_head_dim' is 15");
}

TEST_F(MlaWeightsTest, UnknownMlaAttentionPathIsRefused) {
  auto engine = Engine::open({.model_dir = dir_.path(), .mla_attention = "fused"});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(engine.status().message(), "mla_attention 'fused'");
  // Not silently ignored by a model without MLA.
  engine = Engine::open({.model_dir = testing::tiny_model_dir(), .mla_attention = "naive"});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(engine.status().message(), "model_type 'mixtral'");
}

}  // namespace
}  // namespace moe
