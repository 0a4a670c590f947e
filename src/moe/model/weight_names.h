// Hugging Face tensor names per architecture family (the "weight name table").
#pragma once

#include <string>

#include "moe/model/config.h"

namespace moe {

struct WeightNames {
  std::string embed_tokens, final_norm, lm_head;
  // Per-layer suffixes, under "<layer_prefix><i>.".
  std::string layer_prefix;
  std::string input_norm, post_attention_norm, q_proj, k_proj, v_proj, o_proj, router;
  std::string q_bias, k_bias, v_bias;  // when config.attention_qkv_bias
  std::string q_norm, k_norm;          // when config.qk_norm
  std::string score_bias;              // when config.router.has_score_bias()
  // Multi-head latent attention (config.mla.enabled()): q_a_proj, q_a_layernorm,
  // q_b_proj (q_lora_rank > 0) or q_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj;
  // o_proj as above.
  std::string q_a_proj, q_a_norm, q_b_proj, kv_a_proj, kv_a_norm, kv_b_proj;
  // SwiGLU MLPs "<layer>.<prefix><gate|down|up>": the dense MLP of non-MoE layers and
  // the shared expert of MoE layers (+ its sigmoid gate, Qwen2-MoE).
  std::string dense_mlp_prefix, shared_expert_prefix, shared_expert_gate;
  std::string mlp_gate, mlp_down, mlp_up;
  // Expert tensors: "<layer>.<expert_prefix><j>.<w1|w2|w3>".
  std::string expert_prefix, expert_w1, expert_w2, expert_w3;

  std::string layer(int l, const std::string& suffix) const {
    return layer_prefix + std::to_string(l) + "." + suffix;
  }
  std::string expert(int l, int e, const std::string& suffix) const {
    return layer_prefix + std::to_string(l) + "." + expert_prefix + std::to_string(e) + "." + suffix;
  }
};

WeightNames weight_names_for(ModelFamily family);

}  // namespace moe
