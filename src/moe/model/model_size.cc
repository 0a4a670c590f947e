#include "moe/model/model_size.h"

#include <vector>

namespace moe {
namespace {

struct Linear {
  int64_t rows, cols;  // [out, in]
};

// The Linear weights of one attention block (biases and norms apart).
std::vector<Linear> attention_linears(const ModelConfig& c) {
  const int64_t h = c.hidden_size, heads = c.num_attention_heads;
  if (c.mla.enabled()) {
    const MlaConfig& m = c.mla;
    std::vector<Linear> l;
    if (m.q_lora_rank > 0) {
      l.push_back({m.q_lora_rank, h});                          // q_a_proj
      l.push_back({heads * m.qk_head_dim(), m.q_lora_rank});    // q_b_proj
    } else {
      l.push_back({heads * m.qk_head_dim(), h});                // q_proj
    }
    l.push_back({m.kv_lora_rank + m.qk_rope_head_dim, h});                       // kv_a_proj_with_mqa
    l.push_back({heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank});  // kv_b_proj
    l.push_back({h, heads * m.v_head_dim});                                      // o_proj
    return l;
  }
  const int64_t q_dim = heads * c.head_dim, kv_dim = int64_t{c.num_key_value_heads} * c.head_dim;
  return {{q_dim, h}, {kv_dim, h}, {kv_dim, h}, {h, q_dim}};
}

std::vector<Linear> swiglu_linears(int64_t hidden, int64_t width) { return {{width, hidden}, {width, hidden}, {hidden, width}}; }

int64_t params(const std::vector<Linear>& ls) {
  int64_t n = 0;
  for (const Linear& l : ls) n += l.rows * l.cols;
  return n;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t scale_blocks(const ModelConfig& c, const std::vector<Linear>& ls) {
  int64_t n = 0;
  for (const Linear& l : ls) n += ceil_div(l.rows, c.fp8.block_rows) * ceil_div(l.cols, c.fp8.block_cols);
  return n;
}

int64_t attention_params(const ModelConfig& c) {
  int64_t n = params(attention_linears(c));
  if (c.mla.enabled()) return n + c.mla.q_lora_rank + c.mla.kv_lora_rank;  // q_a_layernorm, kv_a_layernorm
  const int64_t q_dim = int64_t{c.num_attention_heads} * c.head_dim, kv_dim = int64_t{c.num_key_value_heads} * c.head_dim;
  if (c.attention_qkv_bias) n += q_dim + 2 * kv_dim;
  if (c.qk_norm) n += 2 * int64_t{c.head_dim};
  return n;
}

// One MoE block: router, routed experts (all, or `experts_run`), shared experts.
void add_moe_block(const ModelConfig& c, int experts_run, ParamBreakdown* p) {
  const int64_t h = c.hidden_size;
  p->router += int64_t{c.router.num_experts} * h + (c.router.has_score_bias() ? c.router.num_experts : 0);
  p->routed_experts += experts_run * params(swiglu_linears(h, c.moe_intermediate_size));
  if (c.shared_expert_intermediate_size > 0) {
    p->shared_experts += params(swiglu_linears(h, c.shared_expert_intermediate_size)) + (c.shared_expert_gate ? h : 0);
  }
}

// weight_scale_inv values of one MoE (or dense) layer's feed-forward block.
int64_t ffn_scale_blocks(const ModelConfig& c, bool moe) {
  const int64_t h = c.hidden_size;
  if (!moe) return scale_blocks(c, swiglu_linears(h, c.intermediate_size));
  int64_t n = c.router.num_experts * scale_blocks(c, swiglu_linears(h, c.moe_intermediate_size));
  if (c.shared_expert_intermediate_size > 0) n += scale_blocks(c, swiglu_linears(h, c.shared_expert_intermediate_size));
  return n;
}

ParamBreakdown count(const ModelConfig& c, bool active) {
  ParamBreakdown p;
  const int64_t h = c.hidden_size, vocab = c.vocab_size;
  p.embedding = vocab * h;
  p.lm_head = c.tie_word_embeddings ? 0 : vocab * h;
  p.norms = (2 * int64_t{c.num_hidden_layers} + 1) * h;
  p.attention = c.num_hidden_layers * attention_params(c);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.is_moe_layer(l)) {
      add_moe_block(c, active ? c.router.top_k : c.router.num_experts, &p);
    } else {
      p.dense_mlp += params(swiglu_linears(h, c.intermediate_size));
    }
  }
  return p;
}

}  // namespace

int64_t ModelSize::kv_values_per_token() const { return kv_values_per_token_layer * num_layers; }
int64_t ModelSize::naive_kv_values_per_token() const { return naive_kv_values_per_token_layer * num_layers; }

ModelSize compute_model_size(const ModelConfig& c) {
  ModelSize s;
  s.total = count(c, false);
  s.active = count(c, true);
  s.num_layers = c.num_hidden_layers;
  const int64_t h = c.hidden_size;
  const int64_t mtp = c.num_nextn_predict_layers;
  if (mtp > 0) {
    ParamBreakdown moe;
    add_moe_block(c, c.router.num_experts, &moe);
    const int64_t per_module = 2 * int64_t{c.vocab_size} * h  // embed_tokens, shared_head.head
                               + 3 * h                         // enorm, hnorm, shared_head.norm
                               + 2 * h * h                     // eh_proj
                               + attention_params(c) + 2 * h   // the decoder layer: attention, its two norms
                               + moe.sum();                    // and its MoE block
    s.mtp_params = mtp * per_module;
  }
  if (c.fp8.enabled) {
    int64_t n = c.num_hidden_layers * scale_blocks(c, attention_linears(c));
    for (int l = 0; l < c.num_hidden_layers; ++l) n += ffn_scale_blocks(c, c.is_moe_layer(l));
    n += mtp * (scale_blocks(c, {{h, 2 * h}}) + scale_blocks(c, attention_linears(c)) + ffn_scale_blocks(c, true));
    s.fp8_scale_params = n;
  }
  const int64_t heads = c.num_attention_heads;
  if (c.mla.enabled()) {
    s.latent_kv = true;
    s.kv_values_per_token_layer = c.mla.kv_lora_rank + c.mla.qk_rope_head_dim;
    s.naive_kv_values_per_token_layer = heads * (c.mla.qk_head_dim() + c.mla.v_head_dim);
  } else {
    s.kv_values_per_token_layer = 2 * int64_t{c.num_key_value_heads} * c.head_dim;
    s.naive_kv_values_per_token_layer = s.kv_values_per_token_layer;
  }
  return s;
}

}  // namespace moe
