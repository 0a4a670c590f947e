// Adaptive top-k and adaptive_requeue on real MoE layers (layer 1 of the shipped tiny
// Mixtral and tiny DeepSeek-V3, 96 random tokens) against an independent torch reference
// (tests/moe/adaptive_k_ref.py, run by /usr/bin/python3): the experts each token keeps,
// the counts and the layer output, for several targets and k ranges, with the policies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "moe/moe/moe_layer.h"
#include "safetensors_util.h"
#include "test_util.h"
#include "transformer/loaded_model.h"

namespace moe {
namespace {

using nlohmann::json;

struct Case {
  std::string name;
  bool adaptive = false;
  int min_k = 1, max_k = 2;
  double target = 1.0;
  OverflowPolicy policy = OverflowPolicy::kDropless;
  double capacity_factor = 1.0;
};

void write_f32(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> read_f32(const std::string& path) {
  const std::string bytes = testing::read_file(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// Runs `cases` on layer `layer` of the model in `model_dir` for 96 random tokens, here
// and in the reference, and compares the kept experts, the counts and the output.
void check_cases(const std::string& model_dir, int layer, const std::vector<Case>& cases) {
  constexpr int kTokens = 96;
  const auto model = testing::load_model(model_dir);
  const ModelConfig& cfg = model->config;
  const int H = cfg.hidden_size, k = cfg.router.top_k;
  ASSERT_TRUE(cfg.is_moe_layer(layer));
  std::mt19937 rng(16);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kTokens * H));
  for (float& v : x) v = dist(rng);

  testing::ScopedTempDir dir("adaptive_k_layer");
  write_f32(dir.file("x.f32"), x);
  json in = {{"model_dir", model_dir}, {"layer", layer}, {"x_file", dir.file("x.f32")}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    json a = nullptr;
    if (c.adaptive) a = {{"min_k", c.min_k}, {"max_k", c.max_k}, {"target", c.target}};
    in["cases"].push_back({{"adaptive", a},
                           {"policy", overflow_policy_name(c.policy)},
                           {"capacity_factor", c.capacity_factor},
                           {"y_file", dir.file("y" + std::to_string(i) + ".f32")}});
  }
  testing::write_file(dir.file("in.json"), in.dump());
  const auto r = testing::run_command("/usr/bin/python3 " +
                                      testing::sh_quote(testing::source_dir() + "/tests/moe/adaptive_k_ref.py") + " " +
                                      testing::sh_quote(dir.file("in.json")) + " " +
                                      testing::sh_quote(dir.file("out.json")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json want_all = json::parse(testing::read_file(dir.file("out.json")));
  ASSERT_EQ(want_all.size(), cases.size());

  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.name);
    const json& want = want_all[i];
    CapacityOptions opts{c.policy, c.capacity_factor};
    if (c.adaptive) opts.adaptive = {true, c.min_k, c.max_k, c.target, cfg.router.norm_topk_prob};
    MoeWorkspace ws;
    ws.reserve(cfg, kTokens);
    std::vector<float> y(x.size(), 0.0f);
    moe_forward(MoeLayerArgs::f32(cfg, model->weights.layers[static_cast<size_t>(layer)], x.data(), kTokens, y.data()),
                &ws, opts);
    // The rule must have acted in each case (else the comparison proves little).
    if (c.adaptive && c.max_k > c.min_k) {
      EXPECT_GT(ws.counts.adaptive_dropped, 0);
    }
    if (c.policy == OverflowPolicy::kAdaptiveRequeue) {
      EXPECT_GT(ws.counts.requeued, 0);
    }
    EXPECT_EQ(ws.counts.adaptive_dropped, want["shed"].get<int64_t>());
    EXPECT_EQ(ws.counts.requeued, want["requeued"].get<int64_t>());
    EXPECT_EQ(ws.counts.dropped, want["dropped"].get<int64_t>());
    for (int t = 0; t < kTokens; ++t) {
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(ws.topk_idx[static_cast<size_t>(t * k + j)],
                  want["topk_idx"][static_cast<size_t>(t)][static_cast<size_t>(j)].get<int>())
            << "token " << t << " slot " << j;
      }
    }
    const std::vector<float> y_ref = read_f32(dir.file("y" + std::to_string(i) + ".f32"));
    ASSERT_EQ(y_ref.size(), y.size());
    float scale = 0.0f, worst = 0.0f;
    for (size_t q = 0; q < y.size(); ++q) {
      scale = std::max(scale, std::fabs(y_ref[q]));
      worst = std::max(worst, std::fabs(y[q] - y_ref[q]));
    }
    ASSERT_GT(scale, 0.0f);
    EXPECT_LT(worst, 1e-4f * scale) << "max |y - y_ref| " << worst << " (max |y_ref| " << scale << ")";
  }
}

TEST(AdaptiveKLayerTest, MixtralMatchesTheTorchReference) {
  // Softmax top-2 of 8, renormalised: a shed token keeps its first expert at weight 1.
  check_cases(testing::tiny_model_dir(), 1,
              {
                  {"adaptive_target_1", true, 1, 2, 1.0},
                  {"adaptive_target_0.6", true, 1, 2, 0.6},
                  {"adaptive_k1", true, 1, 1, 1.0},
                  {"requeue_0.8", false, 1, 2, 1.0, OverflowPolicy::kAdaptiveRequeue, 0.8},
                  {"adaptive_requeue_0.9", true, 1, 2, 1.2, OverflowPolicy::kAdaptiveRequeue, 0.9},
                  {"adaptive_drop_0.9", true, 1, 2, 1.2, OverflowPolicy::kDrop, 0.9},
              });
}

TEST(AdaptiveKLayerTest, DeepSeekV3MatchesTheTorchReference) {
  // Sigmoid scores, bias for selection, 4 groups keep 2, top-4 of 16, weights over their
  // sum times routed_scaling_factor 2.5: renormalised back to 2.5 after shedding.
  check_cases(testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare", 1,
              {
                  {"adaptive_2_4", true, 2, 4, 1.0},
                  {"adaptive_1_3", true, 1, 3, 0.7},
                  {"adaptive_requeue", true, 1, 4, 0.9, OverflowPolicy::kAdaptiveRequeue, 0.6},
                  {"requeue", false, 1, 4, 1.0, OverflowPolicy::kAdaptiveRequeue, 0.7},
              });
}

}  // namespace
}  // namespace moe
