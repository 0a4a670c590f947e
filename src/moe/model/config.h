// Model hyper-parameters, read from a Hugging Face `config.json`.
//
// One struct for every architecture family; each family's parser
// (config.cc: parse_mixtral, parse_qwen_moe, parse_deepseek) fills the fields it
// defines and validates them. Families: mixtral, qwen2_moe, qwen3_moe (GQA attention);
// deepseek_v2, deepseek_v3 and kimi_k2 (the deepseek_v3 architecture; multi-head latent
// attention).
#pragma once

#include <string>
#include <vector>

#include "moe/model/model_source.h"
#include "moe/status.h"

namespace moe {

enum class ModelFamily { kMixtral, kQwen2Moe, kQwen3Moe, kDeepseekV2, kDeepseekV3 };

// Multi-head latent attention (DeepSeek-V2 paper, section 2.1; transformers
// modeling_deepseek_v3.py). enabled() iff kv_lora_rank > 0 (the DeepSeek families).
//   q:  x -> q_a_proj [q_lora_rank] -> RMSNorm -> q_b_proj [heads * qk_head_dim]
//       (q_lora_rank 0: one q_proj, as DeepSeek-V2-Lite); per head [nope | rope].
//   kv: x -> kv_a_proj_with_mqa [kv_lora_rank + qk_rope_head_dim] = [c_kv | k_rope];
//       RMSNorm(c_kv) -> kv_b_proj [heads * (qk_nope_head_dim + v_head_dim)], per head
//       [k_nope | v]; k_rope is one head shared by all heads.
struct MlaConfig {
  int q_lora_rank = 0;  // 0 = no low-rank q path (a direct q_proj)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// `rope_scaling` of config.json. kLinear: positions divided by factor (transformers
// "linear"). kYarn: YaRN (Peng et al. 2023) as transformers' _compute_yarn_parameters
// and DeepSeek's DeepseekV3YarnRotaryEmbedding: per-frequency blend of interpolated
// (theta-scaled by factor) and extrapolated frequencies over the correction range of
// beta_fast..beta_slow rotations at original_max_position_embeddings; cos/sin scaled
// by get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim), where
// get_mscale(s, m) = 0.1 * m * ln(s) + 1 (1 when s <= 1). Under MLA the softmax scale
// is also multiplied by get_mscale(factor, mscale_all_dim)^2 (when mscale_all_dim != 0).
struct RopeScaling {
  enum class Type { kNone, kLinear, kYarn };
  Type type = Type::kNone;
  double factor = 1.0;
  int original_max_position_embeddings = 0;  // YaRN
  double beta_fast = 32.0, beta_slow = 1.0;  // YaRN (transformers defaults)
  double mscale = 1.0, mscale_all_dim = 0.0;  // YaRN (DeepSeek keys; 0 = absent)
  double attention_factor = 0.0;  // YaRN `attention_factor` when given (overrides mscale ratio); 0 = absent
};

// FP8 weights (`quantization_config` with quant_method "fp8", fmt "e4m3", as
// DeepSeek-V3): each quantised Linear weight [rows, cols] is float8_e4m3fn with a
// `<name>_scale_inv` f32 tensor [ceil(rows / block_rows), ceil(cols / block_cols)];
// the real weight is fp8 value * scale_inv of its block.
struct Fp8Config {
  bool enabled = false;
  int block_rows = 128, block_cols = 128;  // weight_block_size
};

// How a token picks its experts (moe/router.h implements it).
struct RouterConfig {
  // Scores from router logits: softmax over all experts (Mixtral, Qwen) or an
  // element-wise sigmoid (DeepSeek-V3 `scoring_func: sigmoid`).
  enum class Scoring { kSoftmax, kSigmoid };
  // Expert choice (DeepSeek `topk_method`): kGreedy = plain top-k of the scores;
  // kGroupLimited = DeepSeek-V2 `group_limited_greedy` (group score = the group's best
  // score); kNoauxTc = DeepSeek-V3 `noaux_tc` (selection scores = scores +
  // e_score_correction_bias; group score = sum of the group's two best selection scores).
  enum class TopkMethod { kGreedy, kGroupLimited, kNoauxTc };
  Scoring scoring = Scoring::kSoftmax;
  TopkMethod topk_method = TopkMethod::kGreedy;
  int num_experts = 0;         // routed experts per MoE layer
  int top_k = 0;               // experts per token
  bool norm_topk_prob = true;  // renormalise the k selected weights to sum 1 (Mixtral: always)
  int n_group = 1;             // expert groups (consecutive ids); 1 = no group limit
  int topk_group = 1;          // groups kept per token (when n_group > 1)
  double routed_scaling_factor = 1.0;  // multiplies the routed weights (after renormalising)
  bool has_score_bias() const { return topk_method == TopkMethod::kNoauxTc; }
};

struct ModelConfig {
  std::string model_type;  // as in config.json, e.g. "mixtral"
  ModelFamily family = ModelFamily::kMixtral;

  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;      // dense MLP width (Mixtral: unused, experts use it too)
  int moe_intermediate_size = 0;  // routed expert FFN width (Mixtral: intermediate_size)
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;  // GQA head width; MLA: qk_head_dim (q and k), v_head_dim in mla
  double rms_norm_eps = 1e-5;
  double rope_theta = 1e6;
  RopeScaling rope_scaling;
  // RoPE rotates element pairs (2i, 2i+1) (GPT-J / DeepSeek `rope_interleave`) rather
  // than (i, i + d/2) (transformers' rotate_half). DeepSeek families: true.
  bool rope_interleave = false;
  MlaConfig mla;
  Fp8Config fp8;
  int max_position_embeddings = 0;  // usable context, tokens (min with sliding_window)
  bool tie_word_embeddings = false;
  RouterConfig router;
  // Shared expert(s), run on every token of an MoE layer and added to the routed sum:
  // width 0 = none. Qwen2-MoE: one expert scaled by sigmoid(shared_expert_gate(x));
  // DeepSeek: n_shared_experts fused into one of width n * moe_intermediate_size.
  int shared_expert_intermediate_size = 0;
  bool shared_expert_gate = false;
  bool attention_qkv_bias = false;  // q/k/v projections have biases (Qwen2-MoE)
  bool qk_norm = false;             // per-head RMSNorm of q and k before RoPE (Qwen3-MoE)
  // DeepSeek-V3 multi-token-prediction modules stored in the checkpoint after the last
  // layer (`num_nextn_predict_layers`); the engine does not run them (model_size.h counts them).
  int num_nextn_predict_layers = 0;
  // moe_layer[l]: layer l has an MoE block; otherwise a dense SwiGLU MLP of width
  // intermediate_size (Qwen `decoder_sparse_step`/`mlp_only_layers`, DeepSeek
  // `first_k_dense_replace`/`moe_layer_freq`). Size num_hidden_layers.
  std::vector<bool> moe_layer;
  bool is_moe_layer(int l) const { return moe_layer[static_cast<size_t>(l)]; }
  int num_moe_layers() const;

  int bos_token_id = 1;
  std::vector<int> eos_token_ids;  // generation stops at any of these

  bool is_eos(int token) const;
};

// Parses and validates `<dir>/config.json`. Errors name the file and field:
// NotFound (no file), InvalidArgument (missing/mistyped field, inconsistent sizes,
// unknown model_type), Unimplemented (recognised family not supported yet, or a
// feature such as rope_scaling we do not implement).
StatusOr<ModelConfig> load_model_config(const std::string& dir);

// Same, reading "config.json" through `source`; messages name
// source.location() + "/config.json".
StatusOr<ModelConfig> load_model_config(const ModelSource& source);

// Adds generation_config.json's eos_token_id(s) (read through `source`; absent or
// malformed: nothing changes), as transformers does for generate().
void merge_generation_config(const ModelSource& source, ModelConfig* config);

// Same, from JSON text; `source` names it in messages.
StatusOr<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);

}  // namespace moe
