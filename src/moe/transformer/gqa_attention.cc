#include "moe/transformer/gqa_attention.h"

#include <algorithm>

#include "moe/core/check.h"
#include "moe/ops/attention.h"
#include "moe/ops/linear.h"
#include "moe/ops/norm.h"
#include "moe/transformer/rope_config.h"

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

TensorView vec_view(const std::vector<float>& v) {
  return TensorView::f32(v.data(), {static_cast<int64_t>(v.size())});
}

}  // namespace

GqaAttention::GqaAttention(const ModelConfig& config, const ModelWeights& weights, const KernelOptions& kernel)
    : config_(config),
      weights_(weights),
      kernel_(kernel),
      rope_(rope_params(config, config.head_dim)) {}

void GqaAttention::reserve(int64_t max_tokens, int64_t max_segments) {
  if (max_tokens > max_tokens_) {
    const int64_t q_dim = static_cast<int64_t>(config_.num_attention_heads) * config_.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(config_.num_key_value_heads) * config_.head_dim;
    q_ = Tensor::empty(DType::kF32, {max_tokens, q_dim});
    k_ = Tensor::empty(DType::kF32, {max_tokens, kv_dim});
    v_ = Tensor::empty(DType::kF32, {max_tokens, kv_dim});
    attn_ = Tensor::empty(DType::kF32, {max_tokens, q_dim});
    max_tokens_ = max_tokens;
  }
  paged_seqs_.reserve(static_cast<size_t>(max_segments));
}

void GqaAttention::forward(int layer, const TensorView& x, const AttentionBatch& batch, const TensorView& out) {
  const ModelConfig& c = config_;
  const LayerWeights& L = weights_.layers[static_cast<size_t>(layer)];
  const int64_t m = x.dim(0);
  MOE_CHECK(m <= max_tokens_);
  MOE_CHECK((batch.cache != nullptr) != (batch.paged != nullptr));
  const int heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, hd = c.head_dim;
  const int64_t q_dim = static_cast<int64_t>(heads) * hd;
  const int64_t kv_dim = static_cast<int64_t>(kv_heads) * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const TensorView q_rows = q_.view().rows(0, m);       // [m, q_dim]
  const TensorView k_rows = k_.view().rows(0, m);       // [m, kv_dim]
  const TensorView v_rows = v_.view().rows(0, m);       // [m, kv_dim]
  const TensorView attn_rows = attn_.view().rows(0, m); // [m, q_dim]
  float* q = q_rows.data_as<float>();
  float* k = k_rows.data_as<float>();
  float* v = v_rows.data_as<float>();
  float* attn = attn_rows.data_as<float>();
  const float* h = x.data_as<const float>();

  const LinearJob qkv[3] = {{h, m, &L.q_proj, q}, {h, m, &L.k_proj, k}, {h, m, &L.v_proj, v}};
  linear_many(qkv, 3, kernel_);
  if (!L.q_bias.empty()) {
    add_bias(q, m, L.q_bias);
    add_bias(k, m, L.k_bias);
    add_bias(v, m, L.v_bias);
  }
  if (!L.q_norm.empty()) {  // per head: [m * heads, head_dim] rows
    const TensorView q_heads = TensorView::f32(q, {m * heads, hd});
    const TensorView k_heads = TensorView::f32(k, {m * kv_heads, hd});
    rms_norm(q_heads, vec_view(L.q_norm), eps, q_heads);
    rms_norm(k_heads, vec_view(L.k_norm), eps, k_heads);
  }
  for (size_t i = 0; i < batch.num_segments; ++i) {
    const RowSegment& r = batch.segments[i];
    rope_.apply(TensorView::f32(q + r.row0 * q_dim, {r.n, heads, hd}), r.start_pos);
    rope_.apply(TensorView::f32(k + r.row0 * kv_dim, {r.n, kv_heads, hd}), r.start_pos);
  }
  if (batch.paged != nullptr) {
    paged_seqs_.clear();
    for (size_t i = 0; i < batch.num_segments; ++i) {
      const RowSegment& r = batch.segments[i];
      batch.paged->write(layer, r.block_table, r.start_pos, k_rows.rows(r.row0, r.n), v_rows.rows(r.row0, r.n));
      paged_seqs_.push_back(PagedAttentionSeq{q + r.row0 * q_dim, attn + r.row0 * q_dim, r.n, r.start_pos, r.block_table});
    }
    paged_causal_attention(paged_seqs_.data(), paged_seqs_.size(), batch.paged->layer(layer), heads);
  } else {
    MOE_CHECK(batch.num_segments == 1);
    const int64_t start_pos = batch.segments[0].start_pos;
    batch.cache->write(layer, start_pos, k_rows, v_rows);
    causal_attention(TensorView::f32(q, {m, heads, hd}), start_pos, batch.cache->layer(layer),
                     TensorView(attn, DType::kF32, {m, heads, hd}), kernel_);
  }
  linear(attn_rows, L.o_proj, out, kernel_);
}

}  // namespace moe
