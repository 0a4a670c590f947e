// The feed-forward blocks of today's models (FeedForwardBlock, feed_forward_block.h):
//   DenseMlpBlock: the dense SwiGLU MLP of dense layers (Qwen `mlp_only_layers`,
//                  DeepSeek `first_k_dense_replace`).
//   MoeBlock:      the sparse MoE block (router, top-k experts) plus the layer's shared
//                  expert, in this process or expert-parallel over each layer's
//                  EpContext (moe/ep_moe_layer.h).
#pragma once

#include <functional>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/moe_layer.h"
#include "moe/moe/swiglu_mlp.h"
#include "moe/ops/kernel_options.h"
#include "moe/transformer/feed_forward_block.h"

namespace moe {

class DenseMlpBlock final : public FeedForwardBlock {
 public:
  // `weights` must outlive the block.
  DenseMlpBlock(const ModelWeights& weights, const KernelOptions& kernel);
  Status forward(int layer, const TensorView& x, const TensorView& out) override;

 private:
  const ModelWeights& weights_;
  MlpWorkspace ws_;
};

class MoeBlock final : public FeedForwardBlock {
 public:
  using RoutingHook = std::function<void(int layer, const StepRoutingCounts& counts)>;

  // `config`, `weights` and `ep` (if set: one context per layer, not owned) must
  // outlive the block. The contexts may change between forwards, never during one.
  // Workspaces are sized for forwards of up to `max_tokens` tokens (larger ones grow
  // them, as a fallback).
  MoeBlock(const ModelConfig& config, const ModelWeights& weights, const std::vector<EpContext>* ep,
           const KernelOptions& kernel, int64_t max_tokens);
  Status forward(int layer, const TensorView& x, const TensorView& out) override;

  // Called after each forward with the layer and its global routing counts.
  void set_routing_hook(RoutingHook hook) { routing_hook_ = std::move(hook); }
  // Capacity policy in one process (under EP the context's options.capacity applies).
  void set_capacity(const CapacityOptions& capacity) { capacity_ = capacity; }
  const EpTimings& ep_timings() const { return ep_timings_; }

 private:
  const ModelConfig& config_;
  const ModelWeights& weights_;
  const std::vector<EpContext>* ep_;
  MoeWorkspace moe_ws_;
  MlpWorkspace mlp_ws_;  // the shared expert
  EpWorkspacePtr ep_ws_;
  EpTimings ep_timings_;
  CapacityOptions capacity_;
  RoutingHook routing_hook_;
};

}  // namespace moe
