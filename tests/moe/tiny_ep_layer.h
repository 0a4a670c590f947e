// A small f32 MoE layer for the expert-parallel tests: 8 experts of hidden 16 and
// intermediate 24, top-2, weights drawn N(0, 0.3) from `seed` (the router first, scaled by
// `router_scale`, when it is > 0; without a router the tests route by hand). Owns its
// weights; not copyable (the views point into `storage`).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/weights.h"

namespace moe::testing {

constexpr int kTinyHidden = 16, kTinyInter = 24, kTinyExperts = 8, kTinyTopK = 2;

struct TinyEpLayer {
  ModelConfig config;
  LayerWeights layer;
  std::vector<std::vector<float>> storage;

  explicit TinyEpLayer(uint32_t seed, float router_scale = 0) {
    config.hidden_size = kTinyHidden;
    config.intermediate_size = kTinyInter;
    config.moe_intermediate_size = kTinyInter;
    config.router.num_experts = kTinyExperts;
    config.router.top_k = kTinyTopK;
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.3f);
    storage.reserve(1 + 3 * kTinyExperts);  // views stay valid
    auto matrix = [&](int rows, int cols, float scale) {
      storage.emplace_back(static_cast<size_t>(rows * cols));
      for (auto& v : storage.back()) v = scale * dist(rng);
      return Weight2D{storage.back().data(), DType::kF32, rows, cols};
    };
    if (router_scale > 0) layer.router = matrix(kTinyExperts, kTinyHidden, router_scale);
    layer.experts.resize(kTinyExperts);
    for (auto& e : layer.experts) {
      e.w1 = matrix(kTinyInter, kTinyHidden, 1.0f);
      e.w2 = matrix(kTinyHidden, kTinyInter, 1.0f);
      e.w3 = matrix(kTinyInter, kTinyHidden, 1.0f);
      e.loaded = true;
    }
  }
  TinyEpLayer(const TinyEpLayer&) = delete;
  TinyEpLayer& operator=(const TinyEpLayer&) = delete;
};

}  // namespace moe::testing
