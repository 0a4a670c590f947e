// The feed-forward blocks of today's models (FeedForwardBlock, feed_forward_block.h):
//   DenseMlpBlock: the dense SwiGLU MLP of dense layers (Qwen `mlp_only_layers`,
//                  DeepSeek `first_k_dense_replace`).
//   MoeBlock:      the sparse MoE block (router, top-k experts) plus the layer's shared
//                  expert, in this process or expert-parallel over each layer's
//                  EpContext (moe/ep_moe_layer.h).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "moe/comm/communicator.h"

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

class FusedMoe;  // fused_moe.h

class MoeBlock final : public FeedForwardBlock {
 public:
  using RoutingHook = std::function<void(int layer, const StepRoutingCounts& counts)>;

  // `config`, `weights` and `ep` (if set: one context per layer, not owned) must
  // outlive the block. The contexts may change between forwards, never during one.
  // Workspaces are sized for forwards of up to `max_tokens` tokens (larger ones grow
  // them, as a fallback).
  MoeBlock(const ModelConfig& config, const ModelWeights& weights, const std::vector<EpContext>* ep,
           const KernelOptions& kernel, int64_t max_tokens);
  ~MoeBlock() override;
  // forward() runs the layer's context as given; under tensor parallelism (non-fused
  // hybrid) its experts are TP shards and `out` is this rank's PARTIAL sum (the caller
  // all-reduces). A context with expert_tp set is refused here (FailedPrecondition): the
  // fused path sets it itself.
  Status forward(int layer, const TensorView& x, const TensorView& out) override;

  // Hybrid TP x EP: the node-local TP group (not owned, outlives the block; null = none)
  // for forward_fused.
  void set_tp(Communicator* tp) { tp_ = tp; }
  // MixServe's fused MoE block (fused_moe.h): x [m, hidden] f32, the residual stream,
  // replicated in the TP group, updated in place to
  //   x + attn + moe(post_attention_norm(x + attn)) (+ shared expert),
  // where attn = the TP group's sum of attn_partial [m, hidden] f32 (this rank's partial
  // attention output). m may be 0; it must agree inside the TP group. The layer's
  // EpContext (over the EP group) is used with expert_tp = the TP group and its
  // options.overlap (two micro-batches). The block's config is the TP-local one and the
  // weights this rank's shards. Errors: FailedPrecondition without set_tp or EP contexts
  // (and for a context whose expert_tp is another group); FusedMoe::forward's errors.
  Status forward_fused(int layer, const TensorView& attn_partial, const TensorView& x);

  // Called after each forward with the layer and its global routing counts.
  void set_routing_hook(RoutingHook hook) { routing_hook_ = std::move(hook); }
  // Capacity policy in one process (under EP the context's options.capacity applies).
  void set_capacity(const CapacityOptions& capacity) { capacity_ = capacity; }
  const EpTimings& ep_timings() const { return ep_timings_; }
  // Per-step spans of the EP layers and, on EP rank 0 (or in one process), each MoE
  // layer's tokens per expert go to `trace` (not owned; null = off).
  void set_trace(TraceRecorder* trace) { ep_timings_.trace = trace; }

 private:
  // The step's routing counts of `layer`: to the routing hook and the trace.
  void report_routing(int layer, const StepRoutingCounts& counts);
  const ModelConfig& config_;
  const ModelWeights& weights_;
  const std::vector<EpContext>* ep_;
  KernelOptions kernel_;
  Communicator* tp_ = nullptr;
  EpContext fused_ctx_;  // the layer's context with expert_tp = tp_ (reused: no allocation per call)
  std::unique_ptr<FusedMoe> fused_;
  StepRoutingCounts fused_counts_;
  MoeWorkspace moe_ws_;
  MlpWorkspace mlp_ws_;  // the shared expert
  EpWorkspacePtr ep_ws_;
  EpTimings ep_timings_;
  CapacityOptions capacity_;
  RoutingHook routing_hook_;
};

}  // namespace moe
