#include "moe/transformer/decoder.h"

#include <algorithm>

#include "moe/ops/attention.h"
#include "moe/ops/linear.h"
#include "moe/ops/norm.h"
#include "moe/ops/paged_attention.h"

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
      ep_ws_(ep && !ep->empty() ? make_ep_workspace(config, ep->front(), kMaxChunk) : nullptr) {
  moe_ws_.reserve(config, kMaxChunk);
}

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
        const MoeLayerArgs args =
            MoeLayerArgs::f32(config_, weights_.layers[static_cast<size_t>(l)], nullptr, 0, nullptr);
        MOE_RETURN_IF_ERROR(ep_moe_forward(args, (*ep_)[static_cast<size_t>(l)], ep_ws_.get(), &ep_timings_));
        if (routing_hook_) routing_hook_(l, ep_last_routing_counts(*ep_ws_));
      }
    }
    return ok_status();
  }
  MOE_RETURN_IF_ERROR(forward_rows(tokens, m, {Rows{0, m, start_pos, nullptr}}, cache, nullptr));
  if (logits != nullptr) {
    const int64_t hidden = config_.hidden_size;
    rms_norm(x_.data() + (m - 1) * hidden, weights_.final_norm.data(), 1, hidden,
             static_cast<float>(config_.rms_norm_eps), h_.data());
    linear(h_.data(), 1, weights_.lm_head, logits);
  }
  return ok_status();
}

Status Decoder::forward_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache) {
  rows_.clear();
  batch_tokens_.clear();
  int64_t m = 0, num_logits = 0;
  for (const BatchSegment& s : segments) {
    if (s.n <= 0) continue;
    rows_.push_back(Rows{m, s.n, s.start_pos, s.block_table});
    batch_tokens_.insert(batch_tokens_.end(), s.tokens, s.tokens + s.n);
    m += s.n;
    num_logits += s.logits != nullptr;
  }
  if (chunk_hook_) MOE_RETURN_IF_ERROR(chunk_hook_(m));
  if (m == 0) return forward_chunk(nullptr, 0, 0, nullptr, nullptr);
  MOE_RETURN_IF_ERROR(forward_rows(batch_tokens_.data(), m, rows_, nullptr, cache));
  // The final norm + lm_head over the segments' last rows, as one [S, hidden] call.
  const int64_t hidden = config_.hidden_size, vocab = config_.vocab_size;
  if (num_logits == 0) return ok_status();
  if (last_.size() < static_cast<size_t>(num_logits * hidden)) last_.resize(static_cast<size_t>(num_logits * hidden));
  if (batch_logits_.size() < static_cast<size_t>(num_logits * vocab)) {
    batch_logits_.resize(static_cast<size_t>(num_logits * vocab));
  }
  int64_t i = 0, row = 0;
  for (const BatchSegment& s : segments) {
    if (s.n <= 0) continue;
    row += s.n;
    if (s.logits == nullptr) continue;
    rms_norm(x_.data() + (row - 1) * hidden, weights_.final_norm.data(), 1, hidden,
             static_cast<float>(config_.rms_norm_eps), last_.data() + i * hidden);
    ++i;
  }
  linear(last_.data(), num_logits, weights_.lm_head, batch_logits_.data());
  i = 0;
  for (const BatchSegment& s : segments) {
    if (s.n <= 0 || s.logits == nullptr) continue;
    std::copy_n(batch_logits_.data() + i * vocab, vocab, s.logits);
    ++i;
  }
  return ok_status();
}

Status Decoder::forward_rows(const int* tokens, int64_t m, const std::vector<Rows>& segs, KVCache* cache,
                             PagedKVCache* paged) {
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
  AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim, cache ? cache->capacity() : 0};
  paged_seqs_.clear();
  for (const Rows& r : segs) {
    paged_seqs_.push_back(PagedAttentionSeq{q + r.row0 * q_dim, attn + r.row0 * q_dim, r.n, r.start_pos, r.block_table});
  }
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
    for (const Rows& r : segs) {
      rope_.apply(q + r.row0 * q_dim, r.n, q_dim, c.num_attention_heads, r.start_pos);
      rope_.apply(k + r.row0 * kv_dim, r.n, kv_dim, c.num_key_value_heads, r.start_pos);
    }
    if (paged != nullptr) {
      for (const Rows& r : segs) {
        paged->write(l, r.block_table, r.start_pos, r.n, k + r.row0 * kv_dim, v + r.row0 * kv_dim);
      }
      paged_causal_attention(paged_seqs_.data(), paged_seqs_.size(), paged->k_layer(l), paged->v_layer(l),
                             paged->block_size(), shape);
    } else {
      const int64_t start_pos = segs.front().start_pos;
      cache->write(l, start_pos, m, k, v);
      causal_attention(q, m, start_pos, cache->k(l), cache->v(l), shape, attn);
    }
    linear(attn, m, L.o_proj, h);
    for (int64_t i = 0; i < m * hidden; ++i) x[i] += h[i];

    rms_norm(x, L.post_attention_norm.data(), m, hidden, eps, h);
    if (!c.is_moe_layer(l)) {
      swiglu_mlp(L.dense_mlp, h, m, &mlp_ws_, mo);
    } else if (ep_ != nullptr) {
      MOE_RETURN_IF_ERROR(ep_moe_forward(MoeLayerArgs::f32(c, L, h, m, mo), (*ep_)[static_cast<size_t>(l)],
                                         ep_ws_.get(), &ep_timings_));
      if (routing_hook_) routing_hook_(l, ep_last_routing_counts(*ep_ws_));
    } else {
      moe_forward(MoeLayerArgs::f32(c, L, h, m, mo), &moe_ws_, capacity_);
      if (routing_hook_) routing_hook_(l, moe_ws_.counts);
    }
    if (c.is_moe_layer(l)) add_shared_expert(L, h, m, &mlp_ws_, mo);
    for (int64_t i = 0; i < m * hidden; ++i) x[i] += mo[i];
  }
  return ok_status();
}

}  // namespace moe
