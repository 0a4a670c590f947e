// The sparse MoE block, single process: route -> group tokens by expert -> one
// SwiGLU FFN per expert over its group (GEMM) -> weighted combine.
//   out[t] = sum_j topk_weights[t, j] * w2(silu(w1 x_t) * w3 x_t) for expert topk_idx[t, j]
#pragma once

#include <cstdint>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/ops/linear.h"

namespace moe {

// Per-step grouping of (token, slot) assignments by expert: a counting sort.
struct ExpertGroups {
  std::vector<int> tokens_per_expert;  // [num_experts]
  std::vector<int> offsets;            // [num_experts + 1] prefix sums into `token_idx`
  std::vector<int> token_idx;          // [num_tokens * top_k] token of each assignment
  std::vector<float> weight;           // [num_tokens * top_k] its routing weight
};

// Groups assignments by expert, tokens in ascending order within each expert.
void group_by_expert(const int* topk_idx, const float* topk_weights, int64_t num_tokens, int top_k,
                     int num_experts, ExpertGroups* groups);

// Reusable buffers, grown on demand, so the layer loop does not allocate per step.
struct MoeWorkspace {
  std::vector<float> router_logits, topk_weights, gathered, gate, up, expert_out;
  std::vector<int> topk_idx;
  std::vector<LinearJob> jobs;
  ExpertGroups groups;
};

// x: [num_tokens, hidden] f32 (post-attention-norm activations); out: [num_tokens, hidden]
// f32, overwritten. Every expert used must be loaded.
void moe_forward(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                 MoeWorkspace* ws, float* out);

}  // namespace moe
