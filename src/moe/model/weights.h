// The decoder's weights, bound by name from a model source (model_source.h) and checked against the config.
//
// Matrices stay in the mapped files in their stored dtype (no f32 copies); the small
// 1-D norm weights are converted to f32 vectors. An F8_E4M3 Linear weight (a model with
// quantization_config, ModelConfig::fp8) is bound with its `<name>_scale_inv` block
// scales (Weight2D::scale, pointing into the same source); embeddings, lm_head, the
// router and vectors are never F8.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/hf_checkpoint.h"  // callers pass an HfCheckpoint as the ModelSource
#include "moe/model/model_source.h"
#include "moe/status.h"
#include "moe/tensor/weight.h"

namespace moe {

// The block scales of an F8_E4M3 weight are the tensor `<weight name>` + this suffix
// (DeepSeek-V3: "model.layers.3.mlp.experts.7.down_proj.weight_scale_inv").
inline constexpr const char kFp8ScaleSuffix[] = "_scale_inv";

// One SwiGLU expert or MLP: out = w2(silu(w1 x) * w3 x).
struct ExpertWeights {
  Weight2D w1;  // gate_proj [intermediate, hidden]
  Weight2D w2;  // down_proj [hidden, intermediate]
  Weight2D w3;  // up_proj   [intermediate, hidden]
  bool loaded = false;  // false for experts that live on another rank
  // Everything the expert's matrices occupy, FP8 block scales included.
  size_t bytes() const { return w1.bytes() + w2.bytes() + w3.bytes(); }
};

// Multi-head latent attention (config.mla, DeepSeek-V2/V3); shapes with
// r = kv_lora_rank, d_qk = qk_nope_head_dim + qk_rope_head_dim:
struct MlaWeights {
  Weight2D q_a_proj;             // [q_lora_rank, hidden]          (q_lora_rank > 0)
  std::vector<float> q_a_norm;   // [q_lora_rank]                  (q_lora_rank > 0)
  Weight2D q_b_proj;             // [heads * d_qk, q_lora_rank]    (q_lora_rank > 0)
  Weight2D q_proj;               // [heads * d_qk, hidden]         (q_lora_rank == 0)
  Weight2D kv_a_proj;            // [r + qk_rope_head_dim, hidden] kv_a_proj_with_mqa: [c_kv | k_rope]
  std::vector<float> kv_a_norm;  // [r]
  Weight2D kv_b_proj;            // [heads * (qk_nope_head_dim + v_head_dim), r]: per head [W_UK; W_UV]
};

struct LayerWeights {
  std::vector<float> input_norm;           // [hidden]
  std::vector<float> post_attention_norm;  // [hidden]
  MlaWeights mla;                          // MLA models only (then q/k/v_proj are empty)
  Weight2D q_proj;                         // [heads * head_dim, hidden]
  Weight2D k_proj;                         // [kv_heads * head_dim, hidden]
  Weight2D v_proj;                         // [kv_heads * head_dim, hidden]
  Weight2D o_proj;                         // [hidden, heads * head_dim] (MLA: heads * v_head_dim)
  std::vector<float> q_bias, k_bias, v_bias;  // [q dim] / [kv dim]; empty without qkv bias
  std::vector<float> q_norm, k_norm;          // [head_dim]; empty without qk_norm
  // Dense layers (config.is_moe_layer(l) false): the SwiGLU MLP, width intermediate_size.
  ExpertWeights dense_mlp;
  // MoE layers: router, routed experts, optional shared expert.
  Weight2D router;                         // [num_experts, hidden]
  std::vector<float> score_bias;           // [num_experts] e_score_correction_bias (noaux_tc), else empty
  std::vector<ExpertWeights> experts;      // [num_experts] (empty on dense layers)
  ExpertWeights shared_expert;             // width shared_expert_intermediate_size; loaded if > 0
  Weight2D shared_expert_gate;             // [1, hidden] (Qwen2-MoE), else empty
};

struct ModelWeights {
  Weight2D embed_tokens;          // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  Weight2D lm_head;               // [vocab, hidden] (embed_tokens when tied)
};

// Which experts this process holds; default: all of them.
using ExpertFilter = std::function<bool(int layer, int expert)>;

// Binds every tensor the config's family needs, from `source` (an HfCheckpoint or a
// restored StoreModel); the weights point into its memory and live while it does.
// Errors (NotFound for a missing tensor, FailedPrecondition for a wanted expert the
// source did not load, InvalidArgument for a wrong shape or an unsupported dtype) name
// the tensor, its file, and the expected vs found shape (for MLA tensors, with the
// config fields that imply it); for F8_E4M3 weights: NotFound for a missing
// `<name>_scale_inv`, InvalidArgument for a scale of the wrong block shape (expected vs
// found, with the block size of quantization_config), a scale of a non-float dtype, or
// an F8 weight where the config has no quantization_config or the tensor is never
// quantised.
StatusOr<ModelWeights> bind_weights(const ModelConfig& config, const ModelSource& source,
                                    const ExpertFilter& want_expert = nullptr);

// Binds only layer l's MLP block into *layer: the dense MLP, or the router, score bias,
// shared expert (+ gate) and routed experts (those want_expert selects). Used by
// bind_weights, and to test an MoE block alone. Errors as bind_weights.
Status bind_mlp_block(const ModelConfig& config, const ModelSource& source, int l, const ExpertFilter& want_expert,
                      LayerWeights* layer);

// Binds routed expert `expert` of MoE layer `layer` (its w1/w2/w3, weight_names.h)
// from `source` into *out, with loaded = true; *out is unchanged on error. Used by
// bind_mlp_block, and to bind an expert that arrived later (a peer's replica).
// Errors as bind_weights, naming the tensor.
Status bind_expert(const ModelConfig& config, const ModelSource& source, int layer, int expert, ExpertWeights* out);

}  // namespace moe
