#include "moe/model/weights.h"

#include "moe/model/weight_names.h"

namespace moe {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

StatusOr<const StoredTensor*> get_checked(const ModelSource& ckpt, const std::string& name,
                                        const std::vector<int64_t>& expected_shape) {
  MOE_ASSIGN_OR_RETURN(const StoredTensor* view, ckpt.get(name));
  if (view->shape != expected_shape) {
    return invalid_argument("tensor '" + name + "' in " + view->file + " has shape " +
                            view->shape_string() + " but config.json implies " +
                            shape_str(expected_shape));
  }
  if (!view->dtype) {
    return invalid_argument("tensor '" + name + "' in " + view->file + " has dtype " +
                            view->dtype_name + "; supported: F32, BF16, F16 (and F8_E4M3 with block scales)");
  }
  return view;
}

// Binds the block scales `<name>_scale_inv` of F8_E4M3 tensor `name` ([rows, cols]) into *w.
Status bind_fp8_scales(const ModelSource& ckpt, const std::string& name, const StoredTensor& weight,
                       const Fp8Config& fp8, Weight2D* w) {
  const std::string scale_name = name + kFp8ScaleSuffix;
  if (!ckpt.contains(scale_name)) {
    return not_found("tensor '" + scale_name + "' (the block scales of F8_E4M3 tensor '" + name + "' in " +
                     weight.file + ") is missing from " + ckpt.location());
  }
  MOE_ASSIGN_OR_RETURN(const StoredTensor* scale, ckpt.get(scale_name));
  w->block_rows = fp8.block_rows;
  w->block_cols = fp8.block_cols;
  const std::vector<int64_t> expected = {w->scale_rows(), w->scale_cols()};
  if (scale->shape != expected) {
    return invalid_argument("tensor '" + scale_name + "' in " + scale->file + " has shape " + scale->shape_string() +
                            " but F8_E4M3 tensor '" + name + "' " + weight.shape_string() + " with blocks of [" +
                            std::to_string(fp8.block_rows) + ", " + std::to_string(fp8.block_cols) +
                            "] (quantization_config.weight_block_size) needs " + shape_str(expected));
  }
  if (!scale->dtype || *scale->dtype == DType::kF8E4M3) {
    return invalid_argument("tensor '" + scale_name + "' in " + scale->file + " has dtype " + scale->dtype_name +
                            "; block scales must be F32, BF16 or F16");
  }
  w->scale = scale->data;
  w->scale_dtype = *scale->dtype;
  return ok_status();
}

// A [rows, cols] matrix. `fp8` is the model's quantization_config for a Linear weight
// that may be stored as F8_E4M3 (then its block scales are bound too), or nullptr for
// one that is never quantised (embeddings, lm_head, the router).
StatusOr<Weight2D> matrix(const ModelSource& ckpt, const std::string& name, int64_t rows, int64_t cols,
                          const Fp8Config* fp8 = nullptr) {
  MOE_ASSIGN_OR_RETURN(const StoredTensor* view, get_checked(ckpt, name, {rows, cols}));
  Weight2D w;
  w.data = view->data;
  w.dtype = *view->dtype;
  w.rows = rows;
  w.cols = cols;
  if (w.dtype == DType::kF8E4M3) {
    if (fp8 == nullptr) {
      return invalid_argument("tensor '" + name + "' in " + view->file +
                              " is F8_E4M3, which only quantised Linear weights may be (not embeddings, "
                              "lm_head or the router); supported here: F32, BF16, F16");
    }
    if (!fp8->enabled) {
      return invalid_argument("tensor '" + name + "' in " + view->file +
                              " is F8_E4M3 but config.json has no quantization_config (quant_method fp8) "
                              "giving its block size");
    }
    MOE_RETURN_IF_ERROR(bind_fp8_scales(ckpt, name, *view, *fp8, &w));
  }
  return w;
}

StatusOr<std::vector<float>> vector_f32(const ModelSource& ckpt, const std::string& name, int64_t n) {
  MOE_ASSIGN_OR_RETURN(const StoredTensor* view, get_checked(ckpt, name, {n}));
  if (*view->dtype == DType::kF8E4M3) {
    return invalid_argument("tensor '" + name + "' in " + view->file + " is F8_E4M3; vectors must be F32, BF16 or F16");
  }
  std::vector<float> out(static_cast<size_t>(n));
  convert_to_f32(view->data, *view->dtype, out.data(), out.size());
  return out;
}

StatusOr<ExpertWeights> swiglu(const ModelSource& ckpt, const WeightNames& names, const std::string& prefix,
                               int64_t hidden, int64_t inter, const Fp8Config& fp8) {
  ExpertWeights E;
  MOE_ASSIGN_OR_RETURN(E.w1, matrix(ckpt, prefix + names.mlp_gate, inter, hidden, &fp8));
  MOE_ASSIGN_OR_RETURN(E.w2, matrix(ckpt, prefix + names.mlp_down, hidden, inter, &fp8));
  MOE_ASSIGN_OR_RETURN(E.w3, matrix(ckpt, prefix + names.mlp_up, inter, hidden, &fp8));
  E.loaded = true;
  return E;
}

// Adds the config fields that imply a tensor's shape to a shape error.
Status with_fields(Status st, const std::string& fields) {
  if (st.ok() || st.code() != StatusCode::kInvalidArgument) return st;
  return invalid_argument(st.message() + " (from " + fields + ")");
}

// Multi-head latent attention of layer l (weight_names.h; shapes in weights.h).
Status bind_mla(const ModelConfig& c, const ModelSource& ckpt, const WeightNames& names, int l, LayerWeights* layer) {
  const MlaConfig& m = c.mla;
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads;
  const std::string dims = "num_attention_heads " + std::to_string(heads) + ", qk_nope_head_dim " +
                           std::to_string(m.qk_nope_head_dim) + ", qk_rope_head_dim " + std::to_string(m.qk_rope_head_dim);
  MlaWeights& w = layer->mla;
  auto bind = [&](Weight2D* out, const std::string& suffix, int64_t rows, int64_t cols, const std::string& fields) {
    auto r = matrix(ckpt, names.layer(l, suffix), rows, cols, &c.fp8);
    if (!r.ok()) return with_fields(r.status(), fields);
    *out = r.value();
    return ok_status();
  };
  if (m.q_lora_rank > 0) {
    const std::string q_lora = "q_lora_rank " + std::to_string(m.q_lora_rank);
    MOE_RETURN_IF_ERROR(bind(&w.q_a_proj, names.q_a_proj, m.q_lora_rank, hidden, q_lora + ", hidden_size"));
    auto norm = vector_f32(ckpt, names.layer(l, names.q_a_norm), m.q_lora_rank);
    if (!norm.ok()) return with_fields(norm.status(), q_lora);
    w.q_a_norm = std::move(norm.value());
    MOE_RETURN_IF_ERROR(bind(&w.q_b_proj, names.q_b_proj, heads * m.qk_head_dim(), m.q_lora_rank, dims + ", " + q_lora));
  } else {
    MOE_RETURN_IF_ERROR(bind(&w.q_proj, names.q_proj, heads * m.qk_head_dim(), hidden, dims + ", q_lora_rank null"));
  }
  const std::string kv_lora = "kv_lora_rank " + std::to_string(m.kv_lora_rank);
  MOE_RETURN_IF_ERROR(bind(&w.kv_a_proj, names.kv_a_proj, m.kv_lora_rank + m.qk_rope_head_dim, hidden,
                           kv_lora + " + qk_rope_head_dim " + std::to_string(m.qk_rope_head_dim)));
  auto norm = vector_f32(ckpt, names.layer(l, names.kv_a_norm), m.kv_lora_rank);
  if (!norm.ok()) return with_fields(norm.status(), kv_lora);
  w.kv_a_norm = std::move(norm.value());
  MOE_RETURN_IF_ERROR(bind(&w.kv_b_proj, names.kv_b_proj, heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank,
                           "num_attention_heads * (qk_nope_head_dim " + std::to_string(m.qk_nope_head_dim) +
                               " + v_head_dim " + std::to_string(m.v_head_dim) + "), " + kv_lora));
  return bind(&layer->o_proj, names.o_proj, hidden, heads * m.v_head_dim,
              "hidden_size, num_attention_heads * v_head_dim " + std::to_string(m.v_head_dim));
}

}  // namespace

Status bind_mlp_block(const ModelConfig& c, const ModelSource& ckpt, int l, const ExpertFilter& want_expert,
                      LayerWeights* layer) {
  const WeightNames names = weight_names_for(c.family);
  const int64_t hidden = c.hidden_size;
  LayerWeights& L = *layer;
  if (!c.is_moe_layer(l)) {
    MOE_ASSIGN_OR_RETURN(L.dense_mlp,
                         swiglu(ckpt, names, names.layer(l, names.dense_mlp_prefix), hidden, c.intermediate_size, c.fp8));
    return ok_status();
  }
  MOE_ASSIGN_OR_RETURN(L.router, matrix(ckpt, names.layer(l, names.router), c.router.num_experts, hidden));
  if (c.router.has_score_bias()) {
    MOE_ASSIGN_OR_RETURN(L.score_bias, vector_f32(ckpt, names.layer(l, names.score_bias), c.router.num_experts));
  }
  if (c.shared_expert_intermediate_size > 0) {
    MOE_ASSIGN_OR_RETURN(L.shared_expert, swiglu(ckpt, names, names.layer(l, names.shared_expert_prefix), hidden,
                                                 c.shared_expert_intermediate_size, c.fp8));
  }
  if (c.shared_expert_gate) {
    MOE_ASSIGN_OR_RETURN(L.shared_expert_gate, matrix(ckpt, names.layer(l, names.shared_expert_gate), 1, hidden));
  }
  L.experts.resize(static_cast<size_t>(c.router.num_experts));
  for (int e = 0; e < c.router.num_experts; ++e) {
    if (want_expert && !want_expert(l, e)) continue;
    MOE_RETURN_IF_ERROR(bind_expert(c, ckpt, l, e, &L.experts[static_cast<size_t>(e)]));
  }
  return ok_status();
}

Status bind_expert(const ModelConfig& c, const ModelSource& ckpt, int l, int e, ExpertWeights* expert) {
  const WeightNames names = weight_names_for(c.family);
  const int64_t hidden = c.hidden_size;
  const int64_t inter = c.moe_intermediate_size;
  ExpertWeights E;
  MOE_ASSIGN_OR_RETURN(E.w1, matrix(ckpt, names.expert(l, e, names.expert_w1), inter, hidden, &c.fp8));
  MOE_ASSIGN_OR_RETURN(E.w2, matrix(ckpt, names.expert(l, e, names.expert_w2), hidden, inter, &c.fp8));
  MOE_ASSIGN_OR_RETURN(E.w3, matrix(ckpt, names.expert(l, e, names.expert_w3), inter, hidden, &c.fp8));
  E.loaded = true;
  *expert = E;
  return ok_status();
}

StatusOr<ModelWeights> bind_weights(const ModelConfig& c, const ModelSource& ckpt,
                                    const ExpertFilter& want_expert) {
  const WeightNames names = weight_names_for(c.family);
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;

  ModelWeights w;
  MOE_ASSIGN_OR_RETURN(w.embed_tokens, matrix(ckpt, names.embed_tokens, c.vocab_size, hidden));
  if (c.num_hidden_layers > 0) {
    // The last layer first: a count the checkpoint cannot back is refused before the
    // layers are sized by it (config_fit.h checks every size; callers may skip that).
    const std::string last = names.layer(c.num_hidden_layers - 1, names.input_norm);
    if (!ckpt.contains(last)) {
      return not_found("tensor '" + last + "' not found in checkpoint " + ckpt.location() + " (config.json: num_hidden_layers " +
                       std::to_string(c.num_hidden_layers) + ")");
    }
  }
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    MOE_ASSIGN_OR_RETURN(L.input_norm, vector_f32(ckpt, names.layer(l, names.input_norm), hidden));
    MOE_ASSIGN_OR_RETURN(L.post_attention_norm,
                         vector_f32(ckpt, names.layer(l, names.post_attention_norm), hidden));
    if (c.mla.enabled()) {
      MOE_RETURN_IF_ERROR(bind_mla(c, ckpt, names, l, &L));
      MOE_RETURN_IF_ERROR(bind_mlp_block(c, ckpt, l, want_expert, &L));
      continue;
    }
    MOE_ASSIGN_OR_RETURN(L.q_proj, matrix(ckpt, names.layer(l, names.q_proj), q_dim, hidden, &c.fp8));
    MOE_ASSIGN_OR_RETURN(L.k_proj, matrix(ckpt, names.layer(l, names.k_proj), kv_dim, hidden, &c.fp8));
    MOE_ASSIGN_OR_RETURN(L.v_proj, matrix(ckpt, names.layer(l, names.v_proj), kv_dim, hidden, &c.fp8));
    MOE_ASSIGN_OR_RETURN(L.o_proj, matrix(ckpt, names.layer(l, names.o_proj), hidden, q_dim, &c.fp8));
    if (c.attention_qkv_bias) {
      MOE_ASSIGN_OR_RETURN(L.q_bias, vector_f32(ckpt, names.layer(l, names.q_bias), q_dim));
      MOE_ASSIGN_OR_RETURN(L.k_bias, vector_f32(ckpt, names.layer(l, names.k_bias), kv_dim));
      MOE_ASSIGN_OR_RETURN(L.v_bias, vector_f32(ckpt, names.layer(l, names.v_bias), kv_dim));
    }
    if (c.qk_norm) {
      MOE_ASSIGN_OR_RETURN(L.q_norm, vector_f32(ckpt, names.layer(l, names.q_norm), c.head_dim));
      MOE_ASSIGN_OR_RETURN(L.k_norm, vector_f32(ckpt, names.layer(l, names.k_norm), c.head_dim));
    }
    MOE_RETURN_IF_ERROR(bind_mlp_block(c, ckpt, l, want_expert, &L));
  }
  MOE_ASSIGN_OR_RETURN(w.final_norm, vector_f32(ckpt, names.final_norm, hidden));
  if (c.tie_word_embeddings && !ckpt.contains(names.lm_head)) {
    w.lm_head = w.embed_tokens;
  } else {
    MOE_ASSIGN_OR_RETURN(w.lm_head, matrix(ckpt, names.lm_head, c.vocab_size, hidden));
  }
  return w;
}

}  // namespace moe
