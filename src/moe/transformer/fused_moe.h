// MixServe's fused MoE block for hybrid parallelism (TP inside a node, EP across
// nodes): the attention all-reduce and the MoE block's exchanges replaced by
//   RS(attention partials) in the TP group   -> this rank's token shard
//   shard += attention; h = post_attention_norm(shard); route h
//   dispatch all-to-all across nodes (EP group)
//   AG of the received rows in the node -> experts (intermediate dim TP-split) -> RS
//   combine all-to-all (EP group)
//   shared expert (TP-split too): AG(h) in the node, partial, RS
//   shard += moe + shared; AG(shard) in the TP group -> x
// (MixServe, Zhou et al. 2025, "fused AR-A2A": the all-reduce split into RS + AG around
// the all-to-all, which then carries 1/tp of the tokens per rank.)
// With EpOptions::overlap the m rows form two micro-batches whose stages alternate, so
// that one's node-local collectives (ialltoallv on the TP group) are in flight while the
// other's cross-node all-to-all is (ialltoallv on the EP group); one thread.
// Internal to the transformer module (MoeBlock::forward_fused).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/capacity.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/swiglu_mlp.h"
#include "moe/tensor/tensor.h"

namespace moe {

// One call's inputs besides the activations.
struct FusedMoeCall {
  int layer = 0;
  const LayerWeights* weights = nullptr;  // this rank's TP shard (experts, shared expert)
  const EpContext* ep = nullptr;          // the layer's context; its expert_tp is the TP group
  EpWorkspace* ep_ws = nullptr;
  EpTimings* timings = nullptr;  // optional, accumulates
};

class FusedMoe {
 public:
  // `config`: the LOCAL (TP-sharded) config; must outlive this object.
  FusedMoe(const ModelConfig& config, const KernelOptions& kernel);
  ~FusedMoe();

  // x: [m, hidden] f32 residual stream, identical on every rank of the TP group
  // (call.ep->expert_tp), updated in place to x + attn + moe(norm(x + attn)) (+ shared
  // expert); attn_partial: [m, hidden] f32, this rank's partial attention output (the
  // TP group's sum is the attention output). m may be 0 (still collective) and may
  // differ between TP groups, never inside one. Collective over the TP and EP groups.
  // Errors, on every rank of the TP group, before any payload exchange: InvalidArgument
  // when the ranks of the TP group disagree on m, hidden or the expert shard width, or
  // when this rank's expert shards do not match the config (naming the layer and
  // expert); FailedPrecondition for a capacity policy other than dropless or a
  // hierarchical exchange; communication errors. counts (optional): the step's global
  // routing counts (summed over every rank of both groups).
  Status forward(const FusedMoeCall& call, const TensorView& attn_partial, const TensorView& x,
                 StepRoutingCounts* counts);

 private:
  struct MicroBatch;
  Status validate(const FusedMoeCall& call, int64_t m);
  Status begin(const FusedMoeCall& call, MicroBatch& mb);
  StatusOr<bool> step(const FusedMoeCall& call, MicroBatch& mb);
  Status finish_counts(const FusedMoeCall& call, StepRoutingCounts* counts);

  const ModelConfig& config_;
  KernelOptions kernel_;
  MlpWorkspace mlp_ws_;
  std::unique_ptr<MicroBatch> mb_[2];
  std::vector<int64_t> check_send_, check_recv_;
  std::vector<int64_t> counts_acc_;  // [num_experts + 2] tokens per expert, global tokens, degraded
  const float* attn_ = nullptr;      // this call's attn_partial rows
  float* x_ = nullptr;               // this call's residual rows
};

}  // namespace moe
