// Per-step time and per-device memory of one strategy (plan.cc's building blocks).
// Formulas: docs/planner.md, "Step model" and "Memory".
#pragma once

#include <cstdint>

#include "moe/model/config.h"
#include "moe/planner/hardware_profile.h"
#include "moe/planner/plan.h"

namespace moe::planner {

// Parameter counts per layer that the strategies split differently (elements).
struct ModelShape {
  int64_t hidden = 0, vocab = 0, layers = 0, moe_layers = 0, dense_layers = 0;
  int64_t heads = 0, kv_heads = 0;
  int64_t experts = 0, top_k = 0, expert_inter = 0, shared_inter = 0, dense_inter = 0;
  int64_t attn_sharded = 0;     // per layer: split over attention TP (q/k/v/o, MLA q_b/kv_b/o)
  int64_t attn_replicated = 0;  // per layer: norms, MLA q_a/kv_a (+ their norms)
  int64_t qk_dim = 0, v_dim = 0;        // per head, for the score FLOPs
  int64_t kv_values_sharded = 0;        // per token and layer, split over attention TP (GQA K and V)
  int64_t kv_values_replicated = 0;     // per token and layer, every TP rank keeps it (MLA latent)
  bool tied_embeddings = false;
  double weight_bytes = 2;  // linear weights (1 for FP8 checkpoints)
  bool fp8 = false;
};
ModelShape model_shape(const ModelConfig& c);

// One forward step: `seqs` sequences in the whole cluster, each adding `new_tokens` tokens
// and attending to `ctx` cached positions on average; `logit_rows_per_seq` rows of logits.
struct StepInput {
  int64_t seqs = 0;
  int64_t new_tokens = 0;
  double ctx = 0;
};
StepCost step_cost(const ModelShape& m, const HardwareProfile& hw, const Cluster& cl, const Workload& w,
                   const Strategy& s, const StepInput& in);

// Memory per device with `seqs` sequences of `max_len` tokens cached in the cluster and a
// prefill step of `prefill_tokens` tokens in flight.
MemoryUse memory_use(const ModelShape& m, const HardwareProfile& hw, const Workload& w, const Strategy& s,
                     int64_t seqs, int64_t max_len, int64_t prefill_tokens);

}  // namespace moe::planner
