// rope_params(ModelConfig): the RoPE parameters the attention blocks build from
// config.json (theta, rope_scaling, rope_interleave, the served context).
#include "moe/transformer/rope_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "moe/model/config.h"
#include "test_util.h"

namespace moe {
namespace {

ModelConfig load(const std::string& name) {
  const std::string path = testing::source_dir() + "/tests/data/configs/" + name;
  auto c = parse_model_config(testing::read_file(path), path);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

TEST(RopeConfigTest, DeepseekV3) {
  const ModelConfig c = load("deepseek-v3.json");
  const RopeParams p = rope_params(c, c.mla.qk_rope_head_dim);
  EXPECT_EQ(p.dim, 64);
  EXPECT_EQ(p.theta, 10000.0);
  EXPECT_EQ(p.layout, RopeLayout::kInterleaved);
  EXPECT_EQ(p.max_positions, 163840);
  EXPECT_EQ(p.scaling, RopeParams::Scaling::kYarn);
  EXPECT_EQ(p.factor, 40.0);
  EXPECT_EQ(p.original_max_position_embeddings, 4096);
  EXPECT_EQ(p.beta_fast, 32.0);
  EXPECT_EQ(p.beta_slow, 1.0);
  EXPECT_EQ(p.mscale, 1.0);
  EXPECT_EQ(p.mscale_all_dim, 1.0);
  EXPECT_NEAR(yarn_softmax_scale_multiplier(p), std::pow(0.1 * std::log(40.0) + 1, 2), 1e-12);
  EXPECT_EQ(yarn_attention_factor(p), 1.0);
  const RopeTable t(p);  // 163840 positions: only the prefix is tabulated
  EXPECT_EQ(t.cached_positions(), RopeTable::kMaxCachedPositions);
}

TEST(RopeConfigTest, MixtralIsPlainRotateHalfAndLinearParses) {
  ModelConfig c = load("mixtral-8x7b.json");
  RopeParams p = rope_params(c, c.head_dim);
  EXPECT_EQ(p.dim, 128);
  EXPECT_EQ(p.theta, 1e6);
  EXPECT_EQ(p.layout, RopeLayout::kRotateHalf);
  EXPECT_EQ(p.scaling, RopeParams::Scaling::kNone);
  EXPECT_EQ(yarn_attention_factor(p), 1.0);
  c.rope_scaling.type = RopeScaling::Type::kLinear;
  c.rope_scaling.factor = 4;
  p = rope_params(c, c.head_dim);
  EXPECT_EQ(p.scaling, RopeParams::Scaling::kLinear);
  EXPECT_EQ(p.factor, 4.0);
  EXPECT_FLOAT_EQ(rope_inv_freq(p)[0], 0.25f);
}

TEST(RopeConfigTest, KimiK2) {
  const ModelConfig c = load("kimi-k2-instruct.json");
  const RopeParams p = rope_params(c, c.mla.qk_rope_head_dim);
  EXPECT_EQ(p.theta, 50000.0);
  EXPECT_EQ(p.factor, 32.0);
  EXPECT_EQ(p.beta_fast, 1.0);
  EXPECT_EQ(p.layout, RopeLayout::kInterleaved);
  EXPECT_NEAR(yarn_softmax_scale_multiplier(p), std::pow(0.1 * std::log(32.0) + 1, 2), 1e-12);
}

}  // namespace
}  // namespace moe
