// Dense SwiGLU MLPs outside the routed experts: the MLP of dense layers (Qwen
// `mlp_only_layers`, DeepSeek `first_k_dense_replace`) and the shared expert of MoE
// layers (Qwen2-MoE `shared_expert` with its sigmoid gate; DeepSeek `shared_experts`).
#pragma once

#include <cstdint>
#include <vector>

#include "moe/model/weights.h"
#include "moe/ops/kernel_options.h"

namespace moe {

struct MlpWorkspace {
  std::vector<float> gate, up, y, gate_logit;
  KernelOptions kernel;  // how the projections run (set by the owner)
};

// out = w2(silu(w1 x) * w3 x).  x: [m, hidden] f32; out: [m, hidden] f32, overwritten
// (must not alias x).
void swiglu_mlp(const ExpertWeights& w, const float* x, int64_t m, MlpWorkspace* ws, float* out);

// out += g * shared_expert(x) when the layer has a shared expert, with
// g = sigmoid(shared_expert_gate x) per token (Qwen2MoeSparseMoeBlock) or 1 (DeepSeek).
void add_shared_expert(const LayerWeights& layer, const float* x, int64_t m, MlpWorkspace* ws, float* out);

}  // namespace moe
