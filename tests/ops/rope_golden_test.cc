// RoPE variants against tests/data/golden/rope/rope_cases.json, written by an independent
// float32 torch implementation of transformers' rotary embeddings
// (tools/reference/make_rope_golden.py): rotate_half and interleaved layouts, linear
// scaling, YaRN with the DeepSeek-V3, Kimi-K2, DeepSeek-V2-Lite and Qwen-style
// parameters, positions past the tabulated prefix up to 163839.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moe/ops/rope.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;

const json& golden() {
  static const json j = json::parse(testing::read_file(testing::golden_dir() + "/rope/rope_cases.json"));
  return j;
}

RopeParams params_of(const json& c, int64_t max_positions) {
  RopeParams p;
  p.dim = c["dim"].get<int>();
  p.theta = c["theta"].get<double>();
  p.layout = c["layout"] == "interleaved" ? RopeLayout::kInterleaved : RopeLayout::kRotateHalf;
  p.max_positions = max_positions;
  const std::string s = c["scaling"];
  p.scaling = s == "yarn" ? RopeParams::Scaling::kYarn
              : s == "linear" ? RopeParams::Scaling::kLinear
                              : RopeParams::Scaling::kNone;
  p.factor = c.value("factor", 1.0);
  p.original_max_position_embeddings = c.value("original_max_position_embeddings", 0);
  p.beta_fast = c.value("beta_fast", 32.0);
  p.beta_slow = c.value("beta_slow", 1.0);
  // Absent keys as config.cc leaves them: mscale 1, mscale_all_dim 0, attention_factor 0.
  p.mscale = c.value("mscale", 1.0);
  p.mscale_all_dim = c.value("mscale_all_dim", 0.0);
  p.attention_factor = c.value("attention_factor", 0.0);
  return p;
}

class RopeGoldenTest : public ::testing::TestWithParam<int> {};

TEST_P(RopeGoldenTest, MatchesTorchReference) {
  const json& c = golden()["cases"][static_cast<size_t>(GetParam())];
  SCOPED_TRACE(c["name"].get<std::string>());
  const RopeTable rope(params_of(c, golden()["max_positions"].get<int64_t>()));
  const int d = rope.dim(), half = d / 2, heads = c["heads"].get<int>();

  const std::vector<float> inv = c["inv_freq"].get<std::vector<float>>();
  ASSERT_EQ(rope.inv_freq().size(), inv.size());
  for (size_t i = 0; i < inv.size(); ++i) EXPECT_NEAR(rope.inv_freq()[i], inv[i], 2e-7 * inv[i]) << "inv_freq " << i;
  EXPECT_NEAR(rope.attention_factor(), c["attention_factor"].get<double>(), 1e-7);
  const RopeParams p = params_of(c, 1);
  EXPECT_NEAR(yarn_attention_factor(p), c["attention_factor"].get<double>(), 1e-12);
  EXPECT_NEAR(yarn_softmax_scale_multiplier(p), c["softmax_scale_multiplier"].get<double>(), 1e-12);

  const std::vector<int64_t> positions = golden()["positions"].get<std::vector<int64_t>>();
  const std::vector<float> x = c["x"].get<std::vector<float>>();
  const std::vector<float> want = c["rotated"].get<std::vector<float>>();
  ASSERT_EQ(x.size(), positions.size() * static_cast<size_t>(heads * d));
  for (size_t t = 0; t < positions.size(); ++t) {
    std::vector<float> row(x.begin() + static_cast<std::ptrdiff_t>(t * heads * d),
                           x.begin() + static_cast<std::ptrdiff_t>((t + 1) * heads * d));
    rope.apply(row.data(), 1, heads * d, heads, positions[t]);
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < d; ++i) {
        // transformers returns interleaved results de-interleaved: its element i is our
        // 2i (first of pair i), its i + d/2 our 2i + 1. rotate_half: the same index.
        int ours = i;
        if (rope.layout() == RopeLayout::kInterleaved) ours = i < half ? 2 * i : 2 * (i - half) + 1;
        const float expect = want[t * heads * d + static_cast<size_t>(h * d + i)];
        // inv_freq may differ from torch's by an ulp (theta^x: libm powf vs torch's
        // vectorised pow), which moves the f32 angle by pos * inv_freq * 2^-23 or so:
        // up to 4e-3 rad at position 163839 (inputs are in [-2, 2], so |a| + |b| <= 4).
        const int pair = i < half ? i : i - half;
        const double angle_err = static_cast<double>(positions[t]) * inv[static_cast<size_t>(pair)] * 2.4e-7;
        EXPECT_NEAR(row[static_cast<size_t>(h * d + ours)], expect, 2e-6 + 4 * angle_err * rope.attention_factor())
            << "pos " << positions[t] << " head " << h << " dim " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RopeGoldenTest, ::testing::Range(0, 10), [](const auto& info) {
  return golden()["cases"][static_cast<size_t>(info.param)]["name"].get<std::string>();
});

TEST(RopeGoldenFileTest, HasTheTenCases) { EXPECT_EQ(golden()["cases"].size(), 10u); }

}  // namespace
}  // namespace moe
