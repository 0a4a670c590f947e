#include "moe/transformer/mlp_blocks.h"

#include <string>

#include "moe/core/clock.h"
#include "moe/transformer/fused_moe.h"

namespace moe {

DenseMlpBlock::DenseMlpBlock(const ModelWeights& weights, const KernelOptions& kernel) : weights_(weights) {
  ws_.kernel = kernel;
}

Status DenseMlpBlock::forward(int layer, const TensorView& x, const TensorView& out) {
  swiglu_mlp(weights_.layers[static_cast<size_t>(layer)].dense_mlp, x.data_as<const float>(), x.dim(0), &ws_,
             out.data_as<float>());
  return ok_status();
}

MoeBlock::MoeBlock(const ModelConfig& config, const ModelWeights& weights, const std::vector<EpContext>* ep,
                   const KernelOptions& kernel, int64_t max_tokens)
    : config_(config),
      weights_(weights),
      ep_(ep),
      kernel_(kernel),
      ep_ws_(ep && !ep->empty() ? make_ep_workspace(config, ep->front(), max_tokens, kernel) : nullptr) {
  moe_ws_.kernel = kernel;
  moe_ws_.reserve(config, max_tokens);
  mlp_ws_.kernel = kernel;
}

MoeBlock::~MoeBlock() = default;

Status MoeBlock::forward(int layer, const TensorView& x, const TensorView& out) {
  const LayerWeights& L = weights_.layers[static_cast<size_t>(layer)];
  const float* h = x.data_as<const float>();
  float* mo = out.data_as<float>();
  const int64_t m = x.ndim() == 0 ? 0 : x.dim(0);
  if (ep_ != nullptr) {
    if ((*ep_)[static_cast<size_t>(layer)].expert_tp != nullptr) {
      return failed_precondition("layer " + std::to_string(layer) +
                                 ": MoeBlock::forward got an EpContext with expert_tp set (that is the fused path's: "
                                 "forward_fused)");
    }
    MOE_RETURN_IF_ERROR(ep_moe_forward(MoeLayerArgs::f32(config_, L, h, m, mo), (*ep_)[static_cast<size_t>(layer)],
                                       ep_ws_.get(), &ep_timings_));
    report_routing(layer, ep_last_routing_counts(*ep_ws_));
  } else {
    moe_forward(MoeLayerArgs::f32(config_, L, h, m, mo), &moe_ws_, capacity_);
    report_routing(layer, moe_ws_.counts);
  }
  add_shared_expert(L, h, m, &mlp_ws_, mo);
  return ok_status();
}

Status MoeBlock::forward_fused(int layer, const TensorView& attn_partial, const TensorView& x) {
  const std::string where = "layer " + std::to_string(layer);
  if (tp_ == nullptr) return failed_precondition(where + ": MoeBlock::forward_fused needs the TP group (set_tp)");
  if (ep_ == nullptr || ep_->empty() || ep_ws_ == nullptr) {
    return failed_precondition(where + ": the fused MoE block needs expert-parallel contexts (hybrid: --tp K --ep M, M > 1)");
  }
  const EpContext& ctx = (*ep_)[static_cast<size_t>(layer)];
  if (ctx.expert_tp != nullptr && ctx.expert_tp != tp_) {
    return failed_precondition(where + ": the EpContext's expert_tp is not the block's TP group (set_tp)");
  }
  fused_ctx_ = ctx;
  fused_ctx_.expert_tp = tp_;
  if (!fused_) fused_ = std::make_unique<FusedMoe>(config_, kernel_);
  const FusedMoeCall call{layer, &weights_.layers[static_cast<size_t>(layer)], &fused_ctx_, ep_ws_.get(), &ep_timings_};
  const bool counts = routing_hook_ || ep_timings_.trace != nullptr;
  MOE_RETURN_IF_ERROR(fused_->forward(call, attn_partial, x, counts ? &fused_counts_ : nullptr));
  if (counts) report_routing(layer, fused_counts_);
  return ok_status();
}

void MoeBlock::report_routing(int layer, const StepRoutingCounts& counts) {
  if (routing_hook_) routing_hook_(layer, counts);
  TraceRecorder* trace = ep_timings_.trace;
  // The counts are global (identical on every EP rank): recorded once, by EP rank 0.
  if (trace == nullptr || (ep_ != nullptr && (*ep_)[static_cast<size_t>(layer)].comm->rank() != 0)) return;
  trace->experts(layer, counts.tokens_per_expert.data(), static_cast<int>(counts.tokens_per_expert.size()),
                 now_seconds());
}

}  // namespace moe
