#include "moe/model/weight_names.h"

namespace moe {

WeightNames weight_names_for(ModelFamily family) {
  WeightNames n;
  n.embed_tokens = "model.embed_tokens.weight";
  n.final_norm = "model.norm.weight";
  n.lm_head = "lm_head.weight";
  n.layer_prefix = "model.layers.";
  n.input_norm = "input_layernorm.weight";
  n.post_attention_norm = "post_attention_layernorm.weight";
  n.q_proj = "self_attn.q_proj.weight";
  n.k_proj = "self_attn.k_proj.weight";
  n.v_proj = "self_attn.v_proj.weight";
  n.o_proj = "self_attn.o_proj.weight";
  n.q_bias = "self_attn.q_proj.bias";
  n.k_bias = "self_attn.k_proj.bias";
  n.v_bias = "self_attn.v_proj.bias";
  n.q_norm = "self_attn.q_norm.weight";
  n.k_norm = "self_attn.k_norm.weight";
  n.score_bias = "mlp.gate.e_score_correction_bias";
  n.dense_mlp_prefix = "mlp.";
  const bool deepseek = family == ModelFamily::kDeepseekV2 || family == ModelFamily::kDeepseekV3;
  n.shared_expert_prefix = deepseek ? "mlp.shared_experts." : "mlp.shared_expert.";
  // transformers/models/deepseek_v3/modeling_deepseek_v3.py: DeepseekV3Attention
  n.q_a_proj = "self_attn.q_a_proj.weight";
  n.q_a_norm = "self_attn.q_a_layernorm.weight";
  n.q_b_proj = "self_attn.q_b_proj.weight";
  n.kv_a_proj = "self_attn.kv_a_proj_with_mqa.weight";
  n.kv_a_norm = "self_attn.kv_a_layernorm.weight";
  n.kv_b_proj = "self_attn.kv_b_proj.weight";
  n.shared_expert_gate = "mlp.shared_expert_gate.weight";
  n.mlp_gate = "gate_proj.weight";
  n.mlp_down = "down_proj.weight";
  n.mlp_up = "up_proj.weight";
  switch (family) {
    case ModelFamily::kMixtral:
      // transformers/models/mixtral/modeling_mixtral.py: MixtralSparseMoeBlock
      n.router = "block_sparse_moe.gate.weight";
      n.expert_prefix = "block_sparse_moe.experts.";
      n.expert_w1 = "w1.weight";
      n.expert_w2 = "w2.weight";
      n.expert_w3 = "w3.weight";
      break;
    case ModelFamily::kQwen2Moe:
    case ModelFamily::kQwen3Moe:
    case ModelFamily::kDeepseekV2:
    case ModelFamily::kDeepseekV3:
      // Qwen/DeepSeek MoE blocks: mlp.gate, mlp.experts.{j}.{gate,down,up}_proj,
      // mlp.shared_expert(s).{gate,down,up}_proj
      n.router = "mlp.gate.weight";
      n.expert_prefix = "mlp.experts.";
      n.expert_w1 = "gate_proj.weight";
      n.expert_w2 = "down_proj.weight";
      n.expert_w3 = "up_proj.weight";
      break;
  }
  return n;
}

}  // namespace moe
