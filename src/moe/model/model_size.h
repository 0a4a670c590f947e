// Model size arithmetic from a ModelConfig alone (no weights): parameter counts split by
// component, active parameters per token, and KV-cache size per token.
//
// Counting rules (HF checkpoint tensors; every tensor is counted once):
//   embedding      vocab x hidden (embed_tokens)
//   attention      GQA: q/k/v/o projections (+ q/k/v biases, + q_norm/k_norm);
//                  MLA: q_a_proj, q_a_layernorm, q_b_proj (or q_proj when q_lora_rank 0),
//                  kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj
//   dense_mlp      gate/up/down of the dense layers (3 x hidden x intermediate_size)
//   router         mlp.gate (experts x hidden) + e_score_correction_bias (noaux_tc)
//   routed_experts experts x 3 x hidden x moe_intermediate_size per MoE layer
//   shared_experts 3 x hidden x shared width (+ Qwen2's shared_expert_gate, hidden)
//   lm_head        vocab x hidden (0 when tie_word_embeddings)
//   norms          input/post-attention RMSNorm per layer + the final norm
// Active per token: the same with top_k of the routed experts (everything else runs on
// every token). Published "active" figures differ in convention: Mixtral (12.9B) and Qwen3
// (3.3B) count the embedding table, DeepSeek-V2/V3 (2.4B / 37B) and Kimi-K2 (32B) do not
// (ParamBreakdown::sum_excluding_embedding(); lm_head is counted in both).
// DeepSeek-V3's multi-token-prediction modules (num_nextn_predict_layers) are in the HF
// checkpoint but not run for generation: counted apart in mtp_params.
#pragma once

#include <cstdint>

#include "moe/model/config.h"

namespace moe {

struct ParamBreakdown {
  int64_t embedding = 0, attention = 0, dense_mlp = 0, router = 0, routed_experts = 0, shared_experts = 0,
          lm_head = 0, norms = 0;
  int64_t sum() const {
    return embedding + attention + dense_mlp + router + routed_experts + shared_experts + lm_head + norms;
  }
  int64_t sum_excluding_embedding() const { return sum() - embedding; }
};

struct ModelSize {
  ParamBreakdown total;   // the model the engine runs (no MTP modules)
  ParamBreakdown active;  // per token
  // Per MTP module: embed_tokens, enorm, hnorm, eh_proj [hidden, 2 hidden], one MoE
  // decoder layer, shared_head.norm and shared_head.head (as the DeepSeek-V3 checkpoint
  // stores them), times num_nextn_predict_layers. 0 for other models.
  int64_t mtp_params = 0;
  // FP8 checkpoints (fp8.enabled): the f32 `weight_scale_inv` values, one per weight block
  // of every quantised Linear (attention, dense MLP, routed and shared experts, MTP
  // eh_proj and its layer), which Hugging Face's parameter count includes. Else 0.
  int64_t fp8_scale_params = 0;
  // What the HF files hold (Hugging Face's "685B" for DeepSeek-V3).
  int64_t checkpoint_params() const { return total.sum() + mtp_params + fp8_scale_params; }

  // KV cache in values (multiply by the element size) per token and layer, over all
  // layers, and (MLA) what a per-head K/V cache would hold instead.
  bool latent_kv = false;                       // MLA: the cache holds c_kv | k_rope
  int64_t kv_values_per_token_layer = 0;        // GQA 2 x kv_heads x head_dim; MLA kv_lora_rank + qk_rope_head_dim
  int64_t naive_kv_values_per_token_layer = 0;  // MLA: heads x (qk_head_dim + v_head_dim); GQA: as above
  int64_t kv_values_per_token() const;          // x num_hidden_layers
  int64_t naive_kv_values_per_token() const;
  int64_t num_layers = 0;  // layers holding a KV cache (num_hidden_layers)
};

// Requires a config load_model_config accepted (sizes positive, moe_layer sized).
ModelSize compute_model_size(const ModelConfig& c);

}  // namespace moe
