#include "moe/model/config_fit.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe/model/weight_names.h"

namespace moe {
namespace {

constexpr std::string_view kLayerPrefix = "model.layers.";  // every family's (weight_names.cc)

// The decimal index at the start of `*s` and the '.' after it, consumed; -1 (and `*s`
// unchanged) when there is none or it has more than 9 digits.
int64_t take_index(std::string_view* s) {
  size_t n = 0;
  int64_t v = 0;
  while (n < s->size() && n < 10 && (*s)[n] >= '0' && (*s)[n] <= '9') v = v * 10 + ((*s)[n++] - '0');
  if (n == 0 || n > 9 || n >= s->size() || (*s)[n] != '.') return -1;
  s->remove_prefix(n + 1);
  return v;
}

// The layers and experts the tensor names speak of.
struct WeightExtent {
  int64_t layers = 0;                  // 1 + the highest layer index named (0: none)
  std::map<int64_t, int64_t> experts;  // layer -> 1 + the highest expert index named in it
};

// One pass over the names; experts are counted under "<layer>.<expert_prefix><e>." when
// `expert_prefix` is not empty.
WeightExtent scan_extent(const std::vector<TensorInfo>& tensors, std::string_view expert_prefix) {
  WeightExtent x;
  for (const TensorInfo& t : tensors) {
    std::string_view s = t.name;
    if (s.substr(0, kLayerPrefix.size()) != kLayerPrefix) continue;
    s.remove_prefix(kLayerPrefix.size());
    const int64_t l = take_index(&s);
    if (l < 0) continue;
    x.layers = std::max(x.layers, l + 1);
    if (expert_prefix.empty() || s.substr(0, expert_prefix.size()) != expert_prefix) continue;
    s.remove_prefix(expert_prefix.size());
    const int64_t e = take_index(&s);
    if (e >= 0) x.experts[l] = std::max(x.experts[l], e + 1);
  }
  return x;
}

// "model.layers.0-3" for n = 4 indices under `prefix`; "model.layers.0" for one.
std::string index_range(const std::string& prefix, int64_t n) {
  return prefix + (n == 1 ? std::string("0") : "0-" + std::to_string(n - 1));
}

std::string count_of(int64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

Status check_layer_count(const std::string& cfg, int64_t num_layers, const WeightExtent& x) {
  if (num_layers <= x.layers) return ok_status();
  const std::string head = cfg + ": num_hidden_layers " + std::to_string(num_layers);
  if (x.layers == 0) return invalid_argument(head + ", but the checkpoint has no layer weights (model.layers.*)");
  return invalid_argument(head + ", but the checkpoint has weights for " + count_of(x.layers, "layer") + " (" +
                          index_range(std::string(kLayerPrefix), x.layers) + ")");
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string field(const char* name, int64_t value) { return std::string(name) + " " + std::to_string(value); }

// Shape checks against the tensor index, with messages naming the config fields.
class Fit {
 public:
  Fit(const ModelConfig& config, const ModelSource& source, const std::vector<TensorInfo>& tensors)
      : c_(config), source_(source), cfg_(source.location() + "/config.json") {
    index_.reserve(tensors.size());
    for (const TensorInfo& t : tensors) index_.emplace(t.name, &t);
  }

  const std::string& cfg() const { return cfg_; }
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  const TensorInfo* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
  }

  // Tensor `name` exists with `shape`, which the config values `why` imply.
  Status expect(const std::string& name, const std::vector<int64_t>& shape, const std::string& why) const {
    const TensorInfo* t = find(name);
    if (t == nullptr) {
      return not_found("tensor '" + name + "' not found in " + source_.location() + " (" + cfg_ + ": " + why + ")");
    }
    if (t->shape == shape) return ok_status();
    std::string where;
    if (auto view = source_.get(name); view.ok()) where = " in " + (*view)->file;  // a store before restore: no file
    return invalid_argument(cfg_ + ": " + why + " does not fit the checkpoint: tensor '" + name + "'" + where +
                            " has shape " + shape_str(t->shape) + " but config.json implies " + shape_str(shape));
  }

  // [vocab_size, hidden_size] matrices (embedding, lm_head), naming the field that differs.
  Status expect_vocab_matrix(const std::string& name) const {
    const int64_t V = c_.vocab_size, H = c_.hidden_size;
    const TensorInfo* t = find(name);
    std::string why = field("vocab_size", V) + " and " + field("hidden_size", H);
    if (t != nullptr && t->shape.size() == 2) {
      if (t->shape[0] == V) why = field("hidden_size", H);
      else if (t->shape[1] == H) why = field("vocab_size", V);
    }
    return expect(name, {V, H}, why);
  }

 private:
  const ModelConfig& c_;
  const ModelSource& source_;
  std::string cfg_;
  std::unordered_map<std::string_view, const TensorInfo*> index_;
};

const char* expert_count_field(ModelFamily f) {
  switch (f) {
    case ModelFamily::kMixtral: return "num_local_experts";
    case ModelFamily::kQwen2Moe:
    case ModelFamily::kQwen3Moe: return "num_experts";
    case ModelFamily::kDeepseekV2:
    case ModelFamily::kDeepseekV3: return "n_routed_experts";
  }
  return "num_experts";
}

Status check_attention(const ModelConfig& c, const WeightNames& names, const Fit& fit, int l) {
  const int64_t H = c.hidden_size, heads = c.num_attention_heads;
  if (c.mla.enabled()) {
    const MlaConfig& m = c.mla;
    const std::string q_why = field("num_attention_heads", heads) + " x (" + field("qk_nope_head_dim", m.qk_nope_head_dim) +
                              " + " + field("qk_rope_head_dim", m.qk_rope_head_dim) + ")";
    if (m.q_lora_rank > 0) {
      MOE_RETURN_IF_ERROR(fit.expect(names.layer(l, names.q_b_proj), {heads * m.qk_head_dim(), m.q_lora_rank},
                                     q_why + " and " + field("q_lora_rank", m.q_lora_rank)));
    } else {
      MOE_RETURN_IF_ERROR(fit.expect(names.layer(l, names.q_proj), {heads * m.qk_head_dim(), H}, q_why));
    }
    return fit.expect(names.layer(l, names.kv_b_proj), {heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank},
                      field("num_attention_heads", heads) + " x (" + field("qk_nope_head_dim", m.qk_nope_head_dim) +
                          " + " + field("v_head_dim", m.v_head_dim) + ") and " + field("kv_lora_rank", m.kv_lora_rank));
  }
  const std::string hd = " x " + field("head_dim", c.head_dim);
  MOE_RETURN_IF_ERROR(fit.expect(names.layer(l, names.q_proj), {heads * c.head_dim, H},
                                 field("num_attention_heads", heads) + hd));
  return fit.expect(names.layer(l, names.k_proj), {static_cast<int64_t>(c.num_key_value_heads) * c.head_dim, H},
                    field("num_key_value_heads", c.num_key_value_heads) + hd);
}

// A SwiGLU MLP "<prefix><gate|down|up>" of width `inter`.
Status check_swiglu(const WeightNames& names, const Fit& fit, const std::string& prefix, int64_t H, int64_t inter,
                    const std::string& why) {
  MOE_RETURN_IF_ERROR(fit.expect(prefix + names.mlp_gate, {inter, H}, why));
  MOE_RETURN_IF_ERROR(fit.expect(prefix + names.mlp_down, {H, inter}, why));
  return fit.expect(prefix + names.mlp_up, {inter, H}, why);
}

Status check_moe_block(const ModelConfig& c, const WeightNames& names, const Fit& fit, const WeightExtent& x, int l) {
  const int64_t H = c.hidden_size, E = c.router.num_experts, I = c.moe_intermediate_size;
  const char* experts_field = expert_count_field(c.family);
  const auto it = x.experts.find(l);
  const int64_t present = it == x.experts.end() ? 0 : it->second;
  const std::string prefix = names.layer(l, names.expert_prefix);
  if (E > present) {
    const std::string head = fit.cfg() + ": " + field(experts_field, E) + ", but the checkpoint has ";
    if (present == 0) {
      return invalid_argument(head + "no experts in layer " + std::to_string(l) + " (" + prefix +
                              "*), which config.json makes an MoE layer");
    }
    return invalid_argument(head + count_of(present, "expert") + " in layer " + std::to_string(l) + " (" +
                            index_range(prefix, present) + ")");
  }
  MOE_RETURN_IF_ERROR(fit.expect(names.layer(l, names.router), {E, H}, field(experts_field, E)));
  const std::string why = field(c.family == ModelFamily::kMixtral ? "intermediate_size" : "moe_intermediate_size", I);
  for (int e = 0; e < E; ++e) {  // E <= the experts the checkpoint names in this layer
    MOE_RETURN_IF_ERROR(fit.expect(names.expert(l, e, names.expert_w1), {I, H}, why));
    MOE_RETURN_IF_ERROR(fit.expect(names.expert(l, e, names.expert_w2), {H, I}, why));
    MOE_RETURN_IF_ERROR(fit.expect(names.expert(l, e, names.expert_w3), {I, H}, why));
  }
  const int64_t S = c.shared_expert_intermediate_size;
  if (S > 0) {
    const bool deepseek = c.family == ModelFamily::kDeepseekV2 || c.family == ModelFamily::kDeepseekV3;
    const std::string shared_why = deepseek && I > 0 ? field("n_shared_experts", S / I) + " x " + why
                                                     : field("shared_expert_intermediate_size", S);
    MOE_RETURN_IF_ERROR(check_swiglu(names, fit, names.layer(l, names.shared_expert_prefix), H, S, shared_why));
  }
  return ok_status();
}

Status check_fit(const ModelConfig& c, const ModelSource& source, const std::vector<TensorInfo>& tensors) {
  const WeightNames names = weight_names_for(c.family);
  const WeightExtent x = scan_extent(tensors, names.expert_prefix);
  const Fit fit(c, source, tensors);
  // The counts first: every loop below runs over what the checkpoint holds.
  MOE_RETURN_IF_ERROR(check_layer_count(fit.cfg(), c.num_hidden_layers, x));
  MOE_RETURN_IF_ERROR(fit.expect_vocab_matrix(names.embed_tokens));
  if (!c.tie_word_embeddings || fit.has(names.lm_head)) MOE_RETURN_IF_ERROR(fit.expect_vocab_matrix(names.lm_head));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    MOE_RETURN_IF_ERROR(check_attention(c, names, fit, l));
    if (c.is_moe_layer(l)) {
      MOE_RETURN_IF_ERROR(check_moe_block(c, names, fit, x, l));
    } else {
      MOE_RETURN_IF_ERROR(check_swiglu(names, fit, names.layer(l, names.dense_mlp_prefix), c.hidden_size,
                                       c.intermediate_size, field("intermediate_size", c.intermediate_size)));
    }
  }
  return ok_status();
}

}  // namespace

Status check_config_fits_weights(const ModelConfig& config, const ModelSource& source) {
  return check_fit(config, source, source.tensor_infos());
}

StatusOr<ModelConfig> load_model_config_checked(const ModelSource& source) {
  MOE_ASSIGN_OR_RETURN(std::string text, source.read_file("config.json"));
  const std::string cfg = source.location() + "/config.json";
  const std::vector<TensorInfo> tensors = source.tensor_infos();
  // The layer count before the parse, which sizes ModelConfig::moe_layer (and loops) by it.
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("num_hidden_layers") && j["num_hidden_layers"].is_number_integer()) {
    const nlohmann::json& n = j["num_hidden_layers"];  // non-negative literals parse as unsigned
    const int64_t layers = n.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(n.get<uint64_t>(), INT64_MAX))
                                                  : n.get<int64_t>();  // negative: the parse refuses it
    MOE_RETURN_IF_ERROR(check_layer_count(cfg, layers, scan_extent(tensors, {})));
  }
  MOE_ASSIGN_OR_RETURN(ModelConfig config, parse_model_config(text, cfg));
  MOE_RETURN_IF_ERROR(check_fit(config, source, tensors));
  return config;
}

}  // namespace moe
