#include "moe/model/config.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "moe/core/mapped_file.h"

namespace moe {
namespace {

using nlohmann::json;

constexpr int kMaxPositions = 1 << 24;  // max_position_embeddings at most

// Small helpers that read one field and produce messages naming it.
class FieldReader {
 public:
  FieldReader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  Status get_int(const char* field, int* out, bool required, int min_value = 1) const {
    if (!j_.contains(field) || j_[field].is_null()) {
      if (required) return invalid_argument(source_ + ": required field '" + field + "' is missing");
      return ok_status();
    }
    const json& v = j_[field];
    if (!v.is_number_integer() || v.get<int64_t>() < min_value || v.get<int64_t>() > (1ll << 30)) {
      return invalid_argument(source_ + ": field '" + field + "' must be an integer >= " +
                              std::to_string(min_value) + " (got " + v.dump() + ")");
    }
    *out = static_cast<int>(v.get<int64_t>());
    return ok_status();
  }

  Status get_double(const char* field, double* out, bool positive) const {
    if (!j_.contains(field) || j_[field].is_null()) return ok_status();
    const json& v = j_[field];
    if (!v.is_number() || (positive && !(v.get<double>() > 0))) {
      return invalid_argument(source_ + ": field '" + field + "' must be a " +
                              (positive ? "positive " : "") + "number (got " + v.dump() + ")");
    }
    *out = v.get<double>();
    return ok_status();
  }

  Status get_bool(const char* field, bool* out) const {
    if (!j_.contains(field) || j_[field].is_null()) return ok_status();
    if (!j_[field].is_boolean()) {
      return invalid_argument(source_ + ": field '" + field + "' must be true or false (got " +
                              j_[field].dump() + ")");
    }
    *out = j_[field].get<bool>();
    return ok_status();
  }

  // A string field that must be one of `allowed` (when present).
  Status get_enum(const char* field, std::string* out, std::initializer_list<const char*> allowed) const {
    if (!j_.contains(field) || j_[field].is_null()) return ok_status();
    std::string list;
    for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + "\"" + a + "\"";
    const json& v = j_[field];
    if (v.is_string()) {
      for (const char* a : allowed) {
        if (v.get<std::string>() == a) {
          *out = a;
          return ok_status();
        }
      }
    }
    return invalid_argument(source_ + ": field '" + field + "' is " + v.dump() + "; supported: " + list);
  }

  // A list of integers in [0, limit).
  Status get_int_list(const char* field, std::vector<int>* out, int limit) const {
    if (!j_.contains(field) || j_[field].is_null()) return ok_status();
    const json& v = j_[field];
    auto bad = [&] {
      return invalid_argument(source_ + ": field '" + field + "' must be a list of integers in [0, " +
                              std::to_string(limit) + ") (got " + v.dump() + ")");
    };
    if (!v.is_array()) return bad();
    for (const json& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= limit) return bad();
      out->push_back(static_cast<int>(x.get<int64_t>()));
    }
    return ok_status();
  }

  const std::string& source() const { return source_; }

 private:
  const json& j_;
  std::string source_;
};

// GQA families: head_dim (given, or hidden_size / num_attention_heads) and the KV heads.
Status check_gqa_heads(const std::string& src, ModelConfig* c) {
  if (c->head_dim == 0) {
    if (c->hidden_size % c->num_attention_heads != 0) {
      return invalid_argument(src + ": hidden_size " + std::to_string(c->hidden_size) +
                              " is not divisible by num_attention_heads " +
                              std::to_string(c->num_attention_heads) + " (and no head_dim is given)");
    }
    c->head_dim = c->hidden_size / c->num_attention_heads;
  }
  if (c->head_dim % 2 != 0) {
    return invalid_argument(src + ": head_dim " + std::to_string(c->head_dim) +
                            " must be even for rotary embeddings");
  }
  if (c->num_attention_heads % c->num_key_value_heads != 0) {
    return invalid_argument(src + ": num_attention_heads " + std::to_string(c->num_attention_heads) +
                            " is not divisible by num_key_value_heads " +
                            std::to_string(c->num_key_value_heads));
  }
  return ok_status();
}

// `rope_scaling`: null, or an object whose "type" (or "rope_type") is "linear", "yarn"
// or "default" (no scaling); any other type is refused by name.
Status parse_rope_scaling(const json& j, const std::string& src, ModelConfig* c) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return ok_status();
  const json& rs = j["rope_scaling"];
  if (!rs.is_object()) return invalid_argument(src + ": field 'rope_scaling' must be an object or null (got " + rs.dump() + ")");
  std::string type;
  for (const char* key : {"type", "rope_type"}) {
    if (rs.contains(key) && rs[key].is_string()) type = rs[key].get<std::string>();
  }
  if (type.empty()) return invalid_argument(src + ": field 'rope_scaling' has no \"type\" (or \"rope_type\")");
  if (type == "default") return ok_status();
  if (type != "linear" && type != "yarn") {
    return unimplemented(src + ": rope_scaling type '" + type + "' is not supported (supported: \"linear\", \"yarn\")");
  }
  const FieldReader r(rs, src + " rope_scaling");
  RopeScaling& s = c->rope_scaling;
  s.type = type == "yarn" ? RopeScaling::Type::kYarn : RopeScaling::Type::kLinear;
  if (!rs.contains("factor")) return invalid_argument(src + ": rope_scaling field 'factor' is missing");
  MOE_RETURN_IF_ERROR(r.get_double("factor", &s.factor, true));
  if (s.factor < 1.0) {
    return invalid_argument(src + ": rope_scaling field 'factor' must be >= 1 (got " + rs["factor"].dump() + ")");
  }
  if (s.type == RopeScaling::Type::kLinear) return ok_status();
  s.original_max_position_embeddings = c->max_position_embeddings;
  MOE_RETURN_IF_ERROR(r.get_int("original_max_position_embeddings", &s.original_max_position_embeddings, false));
  MOE_RETURN_IF_ERROR(r.get_double("beta_fast", &s.beta_fast, true));
  MOE_RETURN_IF_ERROR(r.get_double("beta_slow", &s.beta_slow, true));
  MOE_RETURN_IF_ERROR(r.get_double("mscale", &s.mscale, false));
  MOE_RETURN_IF_ERROR(r.get_double("mscale_all_dim", &s.mscale_all_dim, false));
  MOE_RETURN_IF_ERROR(r.get_double("attention_factor", &s.attention_factor, true));
  return ok_status();
}

Status parse_common(const json& j, const FieldReader& r, ModelConfig* c) {
  MOE_RETURN_IF_ERROR(r.get_int("vocab_size", &c->vocab_size, true));
  MOE_RETURN_IF_ERROR(r.get_int("hidden_size", &c->hidden_size, true));
  MOE_RETURN_IF_ERROR(r.get_int("intermediate_size", &c->intermediate_size, true));
  MOE_RETURN_IF_ERROR(r.get_int("num_hidden_layers", &c->num_hidden_layers, true));
  MOE_RETURN_IF_ERROR(r.get_int("num_attention_heads", &c->num_attention_heads, true));
  c->num_key_value_heads = c->num_attention_heads;
  MOE_RETURN_IF_ERROR(r.get_int("num_key_value_heads", &c->num_key_value_heads, false));
  MOE_RETURN_IF_ERROR(r.get_int("head_dim", &c->head_dim, false));
  MOE_RETURN_IF_ERROR(r.get_double("rms_norm_eps", &c->rms_norm_eps, true));
  MOE_RETURN_IF_ERROR(r.get_double("rope_theta", &c->rope_theta, true));
  MOE_RETURN_IF_ERROR(r.get_int("max_position_embeddings", &c->max_position_embeddings, true));
  if (c->max_position_embeddings > kMaxPositions) {  // positions must stay exact in f32 (RoPE angles)
    return invalid_argument(r.source() + ": field 'max_position_embeddings' is " +
                            std::to_string(c->max_position_embeddings) + ", more than the supported " +
                            std::to_string(kMaxPositions));
  }
  MOE_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", &c->tie_word_embeddings));
  MOE_RETURN_IF_ERROR(r.get_int("bos_token_id", &c->bos_token_id, false, 0));

  const std::string& src = r.source();
  if (j.contains("hidden_act") && !j["hidden_act"].is_null() && j["hidden_act"] != "silu") {
    return unimplemented(src + ": field 'hidden_act' is " + j["hidden_act"].dump() +
                         ", only \"silu\" is supported");
  }
  MOE_RETURN_IF_ERROR(parse_rope_scaling(j, src, c));
  const bool sliding_off = j.contains("use_sliding_window") && j["use_sliding_window"].is_boolean() &&
                          !j["use_sliding_window"].get<bool>();  // Qwen: the window is only used when enabled
  if (!sliding_off && j.contains("sliding_window") && j["sliding_window"].is_number_integer()) {
    // Without a sliding-window kernel the window bounds the usable context, which
    // keeps results exact.
    int window = 0;
    MOE_RETURN_IF_ERROR(r.get_int("sliding_window", &window, false));
    if (window > 0) c->max_position_embeddings = std::min(c->max_position_embeddings, window);
  }
  // eos_token_id: an integer or a list of integers.
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    auto bad = [&] {
      return invalid_argument(src + ": field 'eos_token_id' must be a token id or a list of ids (got " +
                              e.dump() + ")");
    };
    // Range-checked before narrowing to int, so 2^32 + 2 is not silently read as 2.
    auto add = [&](const json& x) {
      if (!x.is_number_integer()) return false;
      const int64_t id = x.get<int64_t>();
      if (x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) return false;
      if (id < INT32_MIN || id > INT32_MAX) return false;
      c->eos_token_ids.push_back(static_cast<int>(id));
      return true;
    };
    if (e.is_number_integer()) {
      if (!add(e)) return bad();
    } else if (e.is_array()) {
      for (const auto& x : e) {
        if (!add(x)) return bad();
      }
    } else {
      return bad();
    }
  }

  if (c->bos_token_id >= c->vocab_size) {
    return invalid_argument(src + ": bos_token_id " + std::to_string(c->bos_token_id) +
                            " is outside vocab_size " + std::to_string(c->vocab_size));
  }
  for (int e : c->eos_token_ids) {
    if (e < 0 || e >= c->vocab_size) {
      return invalid_argument(src + ": eos_token_id " + std::to_string(e) + " is outside vocab_size " +
                              std::to_string(c->vocab_size));
    }
  }
  return ok_status();
}

// Checks the routed-expert fields shared by every family.
Status check_router(const FieldReader& r, const char* experts_field, const RouterConfig& rc) {
  if (rc.top_k > rc.num_experts) {
    return invalid_argument(r.source() + ": num_experts_per_tok " + std::to_string(rc.top_k) + " exceeds " +
                            experts_field + " " + std::to_string(rc.num_experts));
  }
  return ok_status();
}

Status parse_mixtral(const json& j, const FieldReader& r, ModelConfig* c) {
  MOE_RETURN_IF_ERROR(parse_common(j, r, c));
  MOE_RETURN_IF_ERROR(check_gqa_heads(r.source(), c));
  MOE_RETURN_IF_ERROR(r.get_int("num_local_experts", &c->router.num_experts, true));
  MOE_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", &c->router.top_k, true));
  c->router.scoring = RouterConfig::Scoring::kSoftmax;
  c->router.norm_topk_prob = true;  // Mixtral always renormalises
  c->moe_intermediate_size = c->intermediate_size;
  c->moe_layer.assign(static_cast<size_t>(c->num_hidden_layers), true);
  return check_router(r, "num_local_experts", c->router);
}

// Qwen2-MoE and Qwen3-MoE (transformers Qwen2MoeConfig / Qwen3MoeConfig): layer l is
// sparse iff l is not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0.
Status parse_qwen_moe(const json& j, const FieldReader& r, ModelConfig* c) {
  MOE_RETURN_IF_ERROR(parse_common(j, r, c));
  MOE_RETURN_IF_ERROR(check_gqa_heads(r.source(), c));
  MOE_RETURN_IF_ERROR(r.get_int("num_experts", &c->router.num_experts, true));
  MOE_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", &c->router.top_k, true));
  MOE_RETURN_IF_ERROR(r.get_int("moe_intermediate_size", &c->moe_intermediate_size, true));
  c->router.scoring = RouterConfig::Scoring::kSoftmax;
  c->router.norm_topk_prob = false;  // the transformers default for both
  MOE_RETURN_IF_ERROR(r.get_bool("norm_topk_prob", &c->router.norm_topk_prob));
  int sparse_step = 1;
  MOE_RETURN_IF_ERROR(r.get_int("decoder_sparse_step", &sparse_step, false));
  std::vector<int> mlp_only;
  MOE_RETURN_IF_ERROR(r.get_int_list("mlp_only_layers", &mlp_only, c->num_hidden_layers));
  c->moe_layer.assign(static_cast<size_t>(c->num_hidden_layers), false);
  for (int l = 0; l < c->num_hidden_layers; ++l) {
    c->moe_layer[static_cast<size_t>(l)] =
        (l + 1) % sparse_step == 0 && std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end();
  }
  if (c->family == ModelFamily::kQwen2Moe) {
    c->attention_qkv_bias = true;  // Qwen2MoeAttention: q/k/v with bias, o without
    MOE_RETURN_IF_ERROR(r.get_int("shared_expert_intermediate_size", &c->shared_expert_intermediate_size, false, 0));
    c->shared_expert_gate = c->shared_expert_intermediate_size > 0;
  } else {
    c->qk_norm = true;
    MOE_RETURN_IF_ERROR(r.get_bool("attention_bias", &c->attention_qkv_bias));
    if (c->attention_qkv_bias) {
      return unimplemented(r.source() + ": field 'attention_bias' is true; attention biases are not supported for qwen3_moe");
    }
  }
  return check_router(r, "num_experts", c->router);
}

// MLA fields (DeepSeek-V2/V3): q_lora_rank may be null (V2-Lite: direct q_proj).
Status parse_mla(const json& j, const FieldReader& r, ModelConfig* c) {
  MlaConfig& m = c->mla;
  const std::string& src = r.source();
  MOE_RETURN_IF_ERROR(r.get_int("q_lora_rank", &m.q_lora_rank, false));
  MOE_RETURN_IF_ERROR(r.get_int("kv_lora_rank", &m.kv_lora_rank, true));
  MOE_RETURN_IF_ERROR(r.get_int("qk_nope_head_dim", &m.qk_nope_head_dim, true));
  MOE_RETURN_IF_ERROR(r.get_int("qk_rope_head_dim", &m.qk_rope_head_dim, true));
  MOE_RETURN_IF_ERROR(r.get_int("v_head_dim", &m.v_head_dim, true));
  if (m.qk_rope_head_dim % 2 != 0) {
    return invalid_argument(src + ": field 'qk_rope_head_dim' is " + std::to_string(m.qk_rope_head_dim) +
                            "; it must be even (RoPE rotates pairs of elements)");
  }
  c->head_dim = m.qk_head_dim();
  c->num_key_value_heads = c->num_attention_heads;  // MLA has no KV heads: the latent is shared
  c->rope_interleave = true;  // DeepSeek's convention (transformers: rope_interleave defaults to true)
  MOE_RETURN_IF_ERROR(r.get_bool("rope_interleave", &c->rope_interleave));
  if (j.contains("attention_bias") && j["attention_bias"].is_boolean() && j["attention_bias"].get<bool>()) {
    return unimplemented(src + ": field 'attention_bias' is true; attention biases are not supported for MLA");
  }
  return ok_status();
}

// `quantization_config`: absent, or FP8 e4m3 with square-or-rectangular weight blocks.
Status parse_fp8(const json& j, const std::string& src, ModelConfig* c) {
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return ok_status();
  const json& q = j["quantization_config"];
  auto str = [&](const char* key) {
    return q.is_object() && q.contains(key) && q[key].is_string() ? q[key].get<std::string>() : std::string();
  };
  if (str("quant_method") != "fp8") {
    return unimplemented(src + ": quantization_config quant_method '" + str("quant_method") +
                         "' is not supported (supported: \"fp8\")");
  }
  if (!str("fmt").empty() && str("fmt") != "e4m3") {
    return unimplemented(src + ": quantization_config fmt '" + str("fmt") + "' is not supported (supported: \"e4m3\")");
  }
  if (!str("activation_scheme").empty() && str("activation_scheme") != "dynamic") {
    return unimplemented(src + ": quantization_config activation_scheme '" + str("activation_scheme") +
                         "' is not supported (supported: \"dynamic\"; activations stay f32)");
  }
  Fp8Config& f = c->fp8;
  f.enabled = true;
  if (q.contains("weight_block_size")) {
    const json& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() < 1 || b[1].get<int64_t>() < 1 || b[0].get<int64_t>() > 65536 ||
        b[1].get<int64_t>() > 65536) {
      return invalid_argument(src + ": quantization_config field 'weight_block_size' must be [rows, cols] of positive "
                              "integers (got " + b.dump() + ")");
    }
    f.block_rows = static_cast<int>(b[0].get<int64_t>());
    f.block_cols = static_cast<int>(b[1].get<int64_t>());
  }
  return ok_status();
}

// DeepSeek-V2/V3 (transformers DeepseekV3Config): routed experts, group-limited
// selection and shared experts. Layer l is sparse iff l >= first_k_dense_replace and
// l % moe_layer_freq == 0.
Status parse_deepseek(const json& j, const FieldReader& r, ModelConfig* c) {
  MOE_RETURN_IF_ERROR(parse_common(j, r, c));
  MOE_RETURN_IF_ERROR(parse_mla(j, r, c));
  MOE_RETURN_IF_ERROR(parse_fp8(j, r.source(), c));
  RouterConfig& rc = c->router;
  MOE_RETURN_IF_ERROR(r.get_int("n_routed_experts", &rc.num_experts, true));
  MOE_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", &rc.top_k, true));
  MOE_RETURN_IF_ERROR(r.get_int("moe_intermediate_size", &c->moe_intermediate_size, true));
  std::string scoring = "softmax", method = "greedy";
  MOE_RETURN_IF_ERROR(r.get_enum("scoring_func", &scoring, {"softmax", "sigmoid"}));
  MOE_RETURN_IF_ERROR(r.get_enum("topk_method", &method, {"greedy", "group_limited_greedy", "noaux_tc"}));
  rc.scoring = scoring == "sigmoid" ? RouterConfig::Scoring::kSigmoid : RouterConfig::Scoring::kSoftmax;
  rc.topk_method = method == "noaux_tc"               ? RouterConfig::TopkMethod::kNoauxTc
                   : method == "group_limited_greedy" ? RouterConfig::TopkMethod::kGroupLimited
                                                      : RouterConfig::TopkMethod::kGreedy;
  rc.norm_topk_prob = true;
  MOE_RETURN_IF_ERROR(r.get_bool("norm_topk_prob", &rc.norm_topk_prob));
  MOE_RETURN_IF_ERROR(r.get_double("routed_scaling_factor", &rc.routed_scaling_factor, true));
  MOE_RETURN_IF_ERROR(check_router(r, "n_routed_experts", rc));
  if (rc.topk_method != RouterConfig::TopkMethod::kGreedy) {
    MOE_RETURN_IF_ERROR(r.get_int("n_group", &rc.n_group, true));
    MOE_RETURN_IF_ERROR(r.get_int("topk_group", &rc.topk_group, true));
    const std::string& src = r.source();
    if (rc.num_experts % rc.n_group != 0) {
      return invalid_argument(src + ": n_group " + std::to_string(rc.n_group) + " does not divide n_routed_experts " +
                              std::to_string(rc.num_experts));
    }
    if (rc.topk_group > rc.n_group) {
      return invalid_argument(src + ": topk_group " + std::to_string(rc.topk_group) + " exceeds n_group " +
                              std::to_string(rc.n_group));
    }
    if (rc.topk_group * (rc.num_experts / rc.n_group) < rc.top_k) {
      return invalid_argument(src + ": topk_group " + std::to_string(rc.topk_group) + " groups of " +
                              std::to_string(rc.num_experts / rc.n_group) + " experts hold fewer than num_experts_per_tok " +
                              std::to_string(rc.top_k));
    }
  }
  int shared = 0, first_dense = 0, freq = 1;
  MOE_RETURN_IF_ERROR(r.get_int("n_shared_experts", &shared, false, 0));
  MOE_RETURN_IF_ERROR(r.get_int("first_k_dense_replace", &first_dense, false, 0));
  MOE_RETURN_IF_ERROR(r.get_int("moe_layer_freq", &freq, false));
  MOE_RETURN_IF_ERROR(r.get_int("num_nextn_predict_layers", &c->num_nextn_predict_layers, false, 0));
  c->shared_expert_intermediate_size = shared * c->moe_intermediate_size;
  c->moe_layer.assign(static_cast<size_t>(c->num_hidden_layers), false);
  for (int l = first_dense; l < c->num_hidden_layers; ++l) c->moe_layer[static_cast<size_t>(l)] = l % freq == 0;
  return ok_status();
}

}  // namespace

int ModelConfig::num_moe_layers() const {
  return static_cast<int>(std::count(moe_layer.begin(), moe_layer.end(), true));
}

bool ModelConfig::is_eos(int token) const {
  return std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

StatusOr<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(source + ": not a valid JSON object");
  if (!j.contains("model_type") || !j["model_type"].is_string()) {
    return invalid_argument(source + ": required field 'model_type' is missing or not a string");
  }
  ModelConfig c;
  c.model_type = j["model_type"].get<std::string>();
  FieldReader r(j, source);
  if (c.model_type == "mixtral") {
    c.family = ModelFamily::kMixtral;
    MOE_RETURN_IF_ERROR(parse_mixtral(j, r, &c));
    MOE_RETURN_IF_ERROR(parse_fp8(j, source, &c));  // FP8 block-quantised checkpoints of any family
  } else if (c.model_type == "qwen2_moe" || c.model_type == "qwen3_moe") {
    c.family = c.model_type == "qwen2_moe" ? ModelFamily::kQwen2Moe : ModelFamily::kQwen3Moe;
    MOE_RETURN_IF_ERROR(parse_qwen_moe(j, r, &c));
    MOE_RETURN_IF_ERROR(parse_fp8(j, source, &c));  // e.g. Qwen3-30B-A3B-FP8 (blocks of [128, 128])
  } else if (c.model_type == "deepseek_v2" || c.model_type == "deepseek_v3" || c.model_type == "kimi_k2") {
    // Kimi-K2 is the deepseek_v3 architecture (its config names DeepseekV3ForCausalLM).
    c.family = c.model_type == "deepseek_v2" ? ModelFamily::kDeepseekV2 : ModelFamily::kDeepseekV3;
    MOE_RETURN_IF_ERROR(parse_deepseek(j, r, &c));
  } else {
    return invalid_argument(source + ": unknown model_type '" + c.model_type +
                            "' (supported: mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2)");
  }
  return c;
}

StatusOr<ModelConfig> load_model_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  auto text = read_text_file(path);
  if (!text.ok()) return text.status();
  return parse_model_config(text.value(), path);
}

StatusOr<ModelConfig> load_model_config(const ModelSource& source) {
  auto text = source.read_file("config.json");
  if (!text.ok()) return text.status();
  return parse_model_config(text.value(), source.location() + "/config.json");
}

void merge_generation_config(const ModelSource& source, ModelConfig* config) {
  auto text = source.read_file("generation_config.json");
  if (!text.ok()) return;
  auto j = json::parse(text.value(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("eos_token_id")) return;
  auto add = [&](const json& v) {
    if (v.is_number_integer()) {
      const int64_t id = v.get<int64_t>();
      if (id >= 0 && id < config->vocab_size && !config->is_eos(static_cast<int>(id))) {
        config->eos_token_ids.push_back(static_cast<int>(id));
      }
    }
  };
  if (j["eos_token_id"].is_array()) {
    for (const auto& v : j["eos_token_id"]) add(v);
  } else {
    add(j["eos_token_id"]);
  }
}

}  // namespace moe
