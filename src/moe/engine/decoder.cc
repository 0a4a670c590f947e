#include "moe/engine/decoder.h"

#include <algorithm>

#include "moe/ops/attention.h"
#include "moe/ops/linear.h"
#include "moe/ops/norm.h"

namespace moe {
namespace {

// y[t, :] += bias for t < m.
void add_bias(float* y, int64_t m, const std::vector<float>& bias) {
  const size_t n = bias.size();
  for (int64_t t = 0; t < m; ++t) {
    float* row = y + static_cast<size_t>(t) * n;
    for (size_t i = 0; i < n; ++i) row[i] += bias[i];
  }
}

}  // namespace

Decoder::Decoder(const ModelConfig& config, const ModelWeights& weights, const std::vector<EpContext>* ep)
    : config_(config),
      weights_(weights),
      rope_(config.head_dim, config.rope_theta, config.max_position_embeddings),
      ep_(ep),
      ep_ws_(ep ? make_ep_workspace() : nullptr) {}

Status Decoder::forward(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits) {
  for (int64_t done = 0; done < m; done += kMaxChunk) {
    const int64_t n = std::min(kMaxChunk, m - done);
    if (chunk_hook_) MOE_RETURN_IF_ERROR(chunk_hook_(n));
    MOE_RETURN_IF_ERROR(forward_chunk(tokens + done, n, start_pos + done, cache, done + n == m ? logits : nullptr));
  }
  return ok_status();
}

Status Decoder::forward_chunk(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits) {
  if (m == 0) {
    // A rank without tokens this step still joins every layer's exchanges.
    if (ep_ != nullptr) {
      for (int l = 0; l < config_.num_hidden_layers; ++l) {
        if (!config_.is_moe_layer(l)) continue;
        MOE_RETURN_IF_ERROR(ep_moe_forward(config_, weights_.layers[static_cast<size_t>(l)], nullptr, 0,
                                           (*ep_)[static_cast<size_t>(l)],
                                           ep_ws_.get(), nullptr, &ep_timings_));
        if (routing_hook_) routing_hook_(l, ep_last_routing_counts(*ep_ws_));
      }
    }
    return ok_status();
  }
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto ensure = [](std::vector<float>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    return v.data();
  };
  float* x = ensure(x_, m * hidden);      // [m, hidden] residual stream
  float* h = ensure(h_, m * hidden);      // [m, hidden] normed
  float* q = ensure(q_, m * q_dim);       // [m, q_dim]
  float* k = ensure(k_, m * kv_dim);      // [m, kv_dim]
  float* v = ensure(v_, m * kv_dim);      // [m, kv_dim]
  float* attn = ensure(attn_, m * q_dim); // [m, q_dim]
  float* mo = ensure(moe_out_, m * hidden);

  for (int64_t t = 0; t < m; ++t) {
    convert_to_f32(weights_.embed_tokens.row(tokens[t]), weights_.embed_tokens.dtype, x + t * hidden,
                   static_cast<size_t>(hidden));
  }
  AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim, cache->capacity()};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
    rms_norm(x, L.input_norm.data(), m, hidden, eps, h);
    const LinearJob qkv[3] = {{h, m, &L.q_proj, q}, {h, m, &L.k_proj, k}, {h, m, &L.v_proj, v}};
    linear_many(qkv, 3);
    if (!L.q_bias.empty()) {
      add_bias(q, m, L.q_bias);
      add_bias(k, m, L.k_bias);
      add_bias(v, m, L.v_bias);
    }
    if (!L.q_norm.empty()) {  // per head: [m * heads, head_dim] rows
      rms_norm(q, L.q_norm.data(), m * c.num_attention_heads, c.head_dim, eps, q);
      rms_norm(k, L.k_norm.data(), m * c.num_key_value_heads, c.head_dim, eps, k);
    }
    rope_.apply(q, m, q_dim, c.num_attention_heads, start_pos);
    rope_.apply(k, m, kv_dim, c.num_key_value_heads, start_pos);
    cache->write(l, start_pos, m, k, v);
    causal_attention(q, m, start_pos, cache->k(l), cache->v(l), shape, attn);
    linear(attn, m, L.o_proj, h);
    for (int64_t i = 0; i < m * hidden; ++i) x[i] += h[i];

    rms_norm(x, L.post_attention_norm.data(), m, hidden, eps, h);
    if (!c.is_moe_layer(l)) {
      swiglu_mlp(L.dense_mlp, h, m, &mlp_ws_, mo);
    } else if (ep_ != nullptr) {
      MOE_RETURN_IF_ERROR(ep_moe_forward(c, L, h, m, (*ep_)[static_cast<size_t>(l)], ep_ws_.get(), mo, &ep_timings_));
      if (routing_hook_) routing_hook_(l, ep_last_routing_counts(*ep_ws_));
    } else {
      moe_forward(c, L, h, m, &moe_ws_, mo, capacity_);
      if (routing_hook_) routing_hook_(l, moe_ws_.counts);
    }
    if (c.is_moe_layer(l)) add_shared_expert(L, h, m, &mlp_ws_, mo);
    for (int64_t i = 0; i < m * hidden; ++i) x[i] += mo[i];
  }
  if (logits != nullptr) {
    const float* last = x + (m - 1) * hidden;
    rms_norm(last, weights_.final_norm.data(), 1, hidden, eps, h);
    linear(h, 1, weights_.lm_head, logits);
  }
  return ok_status();
}

}  // namespace moe
