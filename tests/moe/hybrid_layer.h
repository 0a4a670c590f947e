// A small f32 MoE layer for the hybrid (TP x EP) tests, and its tensor-parallel shards
// sliced by hand (independent of model/tp_shard): 8 experts of hidden 16 and
// intermediate 24, top-2 softmax router, a post-attention norm and optionally a gated
// shared expert of width 12 (Qwen2-MoE style). Weights N(0, 0.3) from `seed`. Not
// copyable: the views point into owned storage.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/weights.h"

namespace moe::testing {

struct HybridLayer {
  static constexpr int kHidden = 16, kInter = 24, kSharedInter = 12, kExperts = 8, kTopK = 2;
  ModelConfig config;
  ModelWeights weights;  // one layer
  std::vector<std::vector<float>> storage;

  HybridLayer(uint32_t seed, bool shared_expert) {
    config.hidden_size = kHidden;
    config.intermediate_size = kInter;
    config.moe_intermediate_size = kInter;
    config.num_hidden_layers = 1;
    config.rms_norm_eps = 1e-6;
    config.router.num_experts = kExperts;
    config.router.top_k = kTopK;
    config.shared_expert_intermediate_size = shared_expert ? kSharedInter : 0;
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.3f);
    storage.reserve(16 + 3 * kExperts);
    auto matrix = [&](int rows, int cols) {
      storage.emplace_back(static_cast<size_t>(rows * cols));
      for (auto& v : storage.back()) v = dist(rng);
      return Weight2D{storage.back().data(), DType::kF32, rows, cols};
    };
    weights.layers.resize(1);
    LayerWeights& L = weights.layers[0];
    L.post_attention_norm.resize(kHidden);
    for (auto& v : L.post_attention_norm) v = 1.0f + dist(rng);
    L.router = matrix(kExperts, kHidden);
    L.experts.resize(kExperts);
    for (auto& e : L.experts) {
      e.w1 = matrix(kInter, kHidden);
      e.w2 = matrix(kHidden, kInter);
      e.w3 = matrix(kInter, kHidden);
      e.loaded = true;
    }
    if (shared_expert) {
      L.shared_expert.w1 = matrix(kSharedInter, kHidden);
      L.shared_expert.w2 = matrix(kHidden, kSharedInter);
      L.shared_expert.w3 = matrix(kSharedInter, kHidden);
      L.shared_expert.loaded = true;
      L.shared_expert_gate = matrix(1, kHidden);
    }
  }
  HybridLayer(const HybridLayer&) = delete;
  HybridLayer& operator=(const HybridLayer&) = delete;
};

// TP rank `r` of `tp`'s shard of `full`: w1/w3 rows and w2 columns of the intermediate
// dim [r * I / tp, (r + 1) * I / tp) (I divisible by tp); everything else shared.
struct TpShard {
  ModelConfig config;    // moe/shared intermediate sizes / tp
  ModelWeights weights;  // views into `full` (w1/w3) and into `storage` (w2)
  std::vector<std::vector<float>> storage;

  TpShard(const HybridLayer& full, int r, int tp) : config(full.config), weights(full.weights) {
    config.moe_intermediate_size /= tp;
    config.shared_expert_intermediate_size /= tp;
    storage.reserve(HybridLayer::kExperts + 1);
    LayerWeights& L = weights.layers[0];
    for (auto& e : L.experts) slice(e, r, tp);
    if (L.shared_expert.loaded) slice(L.shared_expert, r, tp);
  }
  TpShard(const TpShard&) = delete;
  TpShard& operator=(const TpShard&) = delete;

 private:
  void slice(ExpertWeights& e, int r, int tp) {
    const int64_t inter = e.w1.rows / tp, hidden = e.w1.cols;
    for (Weight2D* w : {&e.w1, &e.w3}) {
      w->data = static_cast<const float*>(w->data) + r * inter * hidden;
      w->rows = inter;
    }
    storage.emplace_back(static_cast<size_t>(hidden * inter));
    const float* src = static_cast<const float*>(e.w2.data);
    const int64_t full_cols = e.w2.cols;
    for (int64_t h = 0; h < hidden; ++h) {
      std::memcpy(storage.back().data() + h * inter, src + h * full_cols + r * inter,
                  static_cast<size_t>(inter) * sizeof(float));
    }
    e.w2 = Weight2D{storage.back().data(), DType::kF32, hidden, inter};
  }
};

}  // namespace moe::testing
