// Model hyper-parameters, read from a Hugging Face `config.json`.
//
// One struct for every architecture family; each family's parser
// (config.cc: parse_mixtral ...) fills the fields it defines and validates them.
// Families recognised: mixtral (supported); qwen2_moe, qwen3_moe, deepseek_v3
// (recognised, rejected as not yet supported).
#pragma once

#include <string>
#include <vector>

#include "moe/status.h"

namespace moe {

enum class ModelFamily { kMixtral, kQwen2Moe, kQwen3Moe, kDeepseekV3 };

// How a token picks its experts.
struct RouterConfig {
  enum class Scoring { kSoftmax, kSigmoid };
  Scoring scoring = Scoring::kSoftmax;
  int num_experts = 0;         // routed experts per MoE layer
  int top_k = 0;               // experts per token
  bool norm_topk_prob = true;  // renormalise the k selected weights to sum 1 (Mixtral: always)
};

struct ModelConfig {
  std::string model_type;  // as in config.json, e.g. "mixtral"
  ModelFamily family = ModelFamily::kMixtral;

  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;  // expert FFN width (Mixtral: every expert)
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 1e6;
  int max_position_embeddings = 0;  // usable context, tokens (min with sliding_window)
  bool tie_word_embeddings = false;
  RouterConfig router;

  int bos_token_id = 1;
  std::vector<int> eos_token_ids;  // generation stops at any of these

  bool is_eos(int token) const;
};

// Parses and validates `<dir>/config.json`. Errors name the file and field:
// NotFound (no file), InvalidArgument (missing/mistyped field, inconsistent sizes,
// unknown model_type), Unimplemented (recognised family not supported yet, or a
// feature such as rope_scaling we do not implement).
StatusOr<ModelConfig> load_model_config(const std::string& dir);

// Same, from JSON text; `source` names it in messages.
StatusOr<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);

}  // namespace moe
