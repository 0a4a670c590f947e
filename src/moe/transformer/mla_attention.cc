#include "moe/transformer/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moe/core/check.h"
#include "moe/ops/linear.h"
#include "moe/ops/norm.h"
#include "moe/transformer/rope_config.h"

namespace moe {
namespace {

TensorView vec_view(const std::vector<float>& v) {
  return TensorView::f32(v.data(), {static_cast<int64_t>(v.size())});
}

}  // namespace

bool mla_prefers_naive(const ModelConfig& c, int64_t start_pos, int64_t n) {
  const MlaConfig& m = c.mla;
  const double heads = c.num_attention_heads;
  const double e = heads * (m.qk_nope_head_dim + m.v_head_dim) * m.kv_lora_rank;
  const double dn = heads * (m.qk_head_dim() + m.v_head_dim);
  const double da = heads * (2.0 * m.kv_lora_rank + m.qk_rope_head_dim);
  const double s = static_cast<double>(start_pos), k = static_cast<double>(n);
  const double pairs = k * s + k * (k + 1) / 2;
  return s * e < pairs * (da - dn);
}

float MlaAttention::softmax_scale(const ModelConfig& c) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.mla.qk_head_dim()));
  return static_cast<float>(scale * yarn_softmax_scale_multiplier(rope_params(c, c.mla.qk_rope_head_dim)));
}

MlaAttention::MlaAttention(const ModelConfig& config, const ModelWeights& weights, const KernelOptions& kernel,
                           MlaPath path)
    : config_(config),
      weights_(weights),
      kernel_(kernel),
      path_(path),
      rope_(rope_params(config, config.mla.qk_rope_head_dim)),
      scale_(softmax_scale(config)),
      heads_(config.num_attention_heads),
      nope_(config.mla.qk_nope_head_dim),
      rope_dim_(config.mla.qk_rope_head_dim),
      v_dim_(config.mla.v_head_dim),
      lora_(config.mla.kv_lora_rank),
      qk_(config.mla.qk_head_dim()) {
  MOE_CHECK(config.mla.enabled());
  // W_UK^T per head: wuk_t[h * lora + c][j] = kv_b_proj[h * (nope + v) + j][c].
  std::vector<float> row(static_cast<size_t>(lora_));
  for (const LayerWeights& L : weights.layers) {
    const Weight2D& kvb = L.mla.kv_b_proj;
    Tensor t = Tensor::empty(DType::kF32, {static_cast<int64_t>(heads_) * lora_, nope_});
    float* dst = t.view().data_as<float>();
    for (int h = 0; h < heads_; ++h) {
      for (int j = 0; j < nope_; ++j) {
        const int64_t r = static_cast<int64_t>(h) * (nope_ + v_dim_) + j;
        dequantize_rows_f32(kvb, r, r + 1, row.data());  // FP8: times its block scales
        for (int c = 0; c < lora_; ++c) dst[(static_cast<int64_t>(h) * lora_ + c) * nope_ + j] = row[static_cast<size_t>(c)];
      }
    }
    wuk_t_.push_back(std::move(t));
  }
  // Per layer and head, the absorbed path's two projections as weight views, built once.
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    std::vector<Weight2D> uk, uv;
    for (int h = 0; h < heads_; ++h) {
      uk.push_back(Weight2D{wuk_t_[l].view().data_as<float>() + static_cast<int64_t>(h) * lora_ * nope_, DType::kF32,
                            lora_, nope_});
      uv.push_back(row_block(weights.layers[l].mla.kv_b_proj, static_cast<int64_t>(h) * (nope_ + v_dim_) + nope_, v_dim_));
    }
    wuk_heads_.push_back(std::move(uk));
    wuv_heads_.push_back(std::move(uv));
  }
  jobs_.resize(static_cast<size_t>(heads_));
}

void MlaAttention::reserve(int64_t max_tokens, int64_t max_segments) {
  if (max_tokens > max_tokens_) {
    const int64_t heads = heads_;
    q_a_ = Tensor::empty(DType::kF32, {max_tokens, std::max(config_.mla.q_lora_rank, 1)});
    q_ = Tensor::empty(DType::kF32, {max_tokens, heads * qk_});
    kv_ = Tensor::empty(DType::kF32, {max_tokens, lora_ + rope_dim_});
    q_abs_ = Tensor::empty(DType::kF32, {max_tokens, heads * (lora_ + rope_dim_)});
    o_lat_ = Tensor::empty(DType::kF32, {max_tokens, heads * lora_});
    attn_ = Tensor::empty(DType::kF32, {max_tokens, heads * v_dim_});
    gather_ = Tensor::empty(DType::kF32, {heads, max_tokens, std::max(lora_, nope_)});
    scatter_ = Tensor::empty(DType::kF32, {heads, max_tokens, std::max(lora_, v_dim_)});
    max_tokens_ = max_tokens;
  }
  seqs_.reserve(static_cast<size_t>(max_segments));
  absorbed_.reserve(static_cast<size_t>(max_segments));
}

void MlaAttention::project_queries(const LayerWeights& L, const float* x, int64_t m) {
  const MlaWeights& w = L.mla;
  float* q = q_.view().data_as<float>();
  float* kv = kv_.view().data_as<float>();
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (config_.mla.q_lora_rank > 0) {
    float* qa = q_a_.view().data_as<float>();
    const LinearJob a[2] = {{x, m, &w.q_a_proj, qa}, {x, m, &w.kv_a_proj, kv}};
    linear_many(a, 2, kernel_);
    const TensorView qa_rows = TensorView::f32(qa, {m, config_.mla.q_lora_rank});
    rms_norm(qa_rows, vec_view(w.q_a_norm), eps, qa_rows);
    linear(qa_rows, w.q_b_proj, TensorView::f32(q, {m, static_cast<int64_t>(heads_) * qk_}), kernel_);
  } else {
    const LinearJob a[2] = {{x, m, &w.q_proj, q}, {x, m, &w.kv_a_proj, kv}};
    linear_many(a, 2, kernel_);
  }
  // c = RMSNorm(c_kv): the first kv_lora floats of each latent row.
  const int64_t row = lora_ + rope_dim_;
  for (int64_t t = 0; t < m; ++t) {
    const TensorView c = TensorView::f32(kv + t * row, {1, lora_});
    rms_norm(c, vec_view(w.kv_a_norm), eps, c);
  }
}

LatentRows MlaAttention::latent_rows(int layer, const AttentionBatch& batch) const {
  const int64_t row = lora_ + rope_dim_;
  if (batch.paged != nullptr) return LatentRows{batch.paged->k_layer(layer), row, batch.paged->block_size()};
  return LatentRows{batch.cache->k(layer), row, 0};
}

void MlaAttention::write_cache(int layer, const AttentionBatch& batch) {
  const TensorView kv = kv_.view();
  for (size_t i = 0; i < batch.num_segments; ++i) {
    const RowSegment& r = batch.segments[i];
    const TensorView rows = kv.rows(r.row0, r.n);
    // A latent cache has no V: the rows are passed for both and V is ignored.
    if (batch.paged != nullptr) {
      batch.paged->write(layer, r.block_table, r.start_pos, rows, rows);
    } else {
      batch.cache->write(layer, r.start_pos, rows, rows);
    }
  }
}

void MlaAttention::attend_absorbed(int layer, const AttentionBatch& batch, const RowSegment* segs, size_t n) {
  int64_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, segs[i].row0 + segs[i].n);
  const int64_t lr = lora_ + rope_dim_;
  const int64_t gstride = max_tokens_ * std::max(lora_, nope_);
  const int64_t sstride = max_tokens_ * std::max(lora_, v_dim_);
  const float* q = q_.view().data_as<const float>();
  float* q_abs = q_abs_.view().data_as<float>();
  float* o_lat = o_lat_.view().data_as<float>();
  float* attn = attn_.view().data_as<float>();
  float* g = gather_.view().data_as<float>();
  float* sc = scatter_.view().data_as<float>();
  // 1. q_abs = [q_nope W_UK | q_rope] per head, over rows [0, m).
  const std::vector<Weight2D>& wuk = wuk_heads_[static_cast<size_t>(layer)];
  const std::vector<Weight2D>& wuv = wuv_heads_[static_cast<size_t>(layer)];
  for (int h = 0; h < heads_; ++h) {
    float* gh = g + h * gstride;
    for (int64_t t = 0; t < m; ++t) std::memcpy(gh + t * nope_, q + (t * heads_ + h) * qk_, sizeof(float) * nope_);
    jobs_[static_cast<size_t>(h)] = LinearJob{gh, m, &wuk[static_cast<size_t>(h)], sc + h * sstride};
  }
  linear_many(jobs_.data(), jobs_.size(), kernel_);
  for (int64_t t = 0; t < m; ++t) {
    for (int h = 0; h < heads_; ++h) {
      float* dst = q_abs + (t * heads_ + h) * lr;
      std::memcpy(dst, sc + h * sstride + t * lora_, sizeof(float) * lora_);
      std::memcpy(dst + lora_, q + (t * heads_ + h) * qk_ + nope_, sizeof(float) * rope_dim_);
    }
  }
  // 2. Attend in the latent space.
  std::fill(o_lat, o_lat + m * heads_ * lora_, 0.0f);  // rows of naive segments stay 0
  seqs_.clear();
  for (size_t i = 0; i < n; ++i) {
    const RowSegment& r = segs[i];
    seqs_.push_back(MlaSeq{q_abs + r.row0 * heads_ * lr, o_lat + r.row0 * heads_ * lora_, r.n, r.start_pos,
                           r.block_table});
  }
  mla_latent_attention(seqs_.data(), seqs_.size(), latent_rows(layer, batch),
                       MlaAttentionShape{heads_, static_cast<int>(lr), lora_, scale_});
  // 3. attn = o_lat W_UV^T per head.
  for (int h = 0; h < heads_; ++h) {
    float* gh = g + h * gstride;
    for (int64_t t = 0; t < m; ++t) std::memcpy(gh + t * lora_, o_lat + (t * heads_ + h) * lora_, sizeof(float) * lora_);
    jobs_[static_cast<size_t>(h)] = LinearJob{gh, m, &wuv[static_cast<size_t>(h)], sc + h * sstride};
  }
  linear_many(jobs_.data(), jobs_.size(), kernel_);
  for (size_t i = 0; i < n; ++i) {
    const RowSegment& r = segs[i];
    for (int64_t t = r.row0; t < r.row0 + r.n; ++t) {
      for (int h = 0; h < heads_; ++h) {
        std::memcpy(attn + (t * heads_ + h) * v_dim_, sc + h * sstride + t * v_dim_, sizeof(float) * v_dim_);
      }
    }
  }
}

void MlaAttention::attend_naive(int layer, const AttentionBatch& batch, const RowSegment& seg) {
  const MlaWeights& w = weights_.layers[static_cast<size_t>(layer)].mla;
  const int64_t ctx = seg.start_pos + seg.n;
  const int64_t kvb = nope_ + v_dim_;
  const LatentRows lat = latent_rows(layer, batch);
  ctx_lat_.resize(static_cast<size_t>(ctx * lora_));
  ctx_kv_.resize(static_cast<size_t>(ctx * heads_ * kvb));
  ctx_k_.resize(static_cast<size_t>(ctx * heads_ * qk_));
  ctx_v_.resize(static_cast<size_t>(ctx * heads_ * v_dim_));
  auto row_at = [&](int64_t p) {
    if (lat.block_size == 0) return lat.base + p * lat.row;
    return lat.base + (static_cast<int64_t>(seg.block_table[p / lat.block_size]) * lat.block_size +
                       p % lat.block_size) * lat.row;
  };
  for (int64_t p = 0; p < ctx; ++p) std::memcpy(ctx_lat_.data() + p * lora_, row_at(p), sizeof(float) * lora_);
  // [k_nope | v] of every head at every position: c W_UKV^T.
  linear(TensorView::f32(ctx_lat_.data(), {ctx, lora_}), w.kv_b_proj,
         TensorView::f32(ctx_kv_.data(), {ctx, static_cast<int64_t>(heads_) * kvb}), kernel_);
  for (int64_t p = 0; p < ctx; ++p) {
    const float* k_rope = row_at(p) + lora_;
    for (int h = 0; h < heads_; ++h) {
      const float* src = ctx_kv_.data() + (p * heads_ + h) * kvb;
      float* k = ctx_k_.data() + (p * heads_ + h) * qk_;
      std::memcpy(k, src, sizeof(float) * nope_);
      std::memcpy(k + nope_, k_rope, sizeof(float) * rope_dim_);
      std::memcpy(ctx_v_.data() + (p * heads_ + h) * v_dim_, src + nope_, sizeof(float) * v_dim_);
    }
  }
  const MlaSeq s{q_.view().data_as<const float>() + seg.row0 * heads_ * qk_,
                 attn_.view().data_as<float>() + seg.row0 * heads_ * v_dim_, seg.n, seg.start_pos, nullptr};
  mla_expanded_attention(s, ctx_k_.data(), ctx_v_.data(), MlaAttentionShape{heads_, qk_, v_dim_, scale_});
}

void MlaAttention::forward(int layer, const TensorView& x, const AttentionBatch& batch, const TensorView& out) {
  const LayerWeights& L = weights_.layers[static_cast<size_t>(layer)];
  const int64_t m = x.dim(0);
  MOE_CHECK(m <= max_tokens_);
  MOE_CHECK((batch.cache != nullptr) != (batch.paged != nullptr));
  MOE_CHECK(batch.paged == nullptr || batch.num_segments <= seqs_.capacity());
  project_queries(L, x.data_as<const float>(), m);
  float* q = q_.view().data_as<float>();
  float* kv = kv_.view().data_as<float>();
  const int64_t lr = lora_ + rope_dim_;
  // RoPE on the rope parts only: each head's q_rope, and the shared k_rope.
  for (size_t i = 0; i < batch.num_segments; ++i) {
    const RowSegment& r = batch.segments[i];
    rope_.apply(RopeTable::Rows{.x = q + r.row0 * heads_ * qk_ + nope_,
                                .m = r.n,
                                .row_stride = static_cast<int64_t>(heads_) * qk_,
                                .num_heads = heads_,
                                .head_stride = qk_},
                r.start_pos);
    rope_.apply(RopeTable::Rows{.x = kv + r.row0 * lr + lora_, .m = r.n, .row_stride = lr, .num_heads = 1}, r.start_pos);
  }
  write_cache(layer, batch);
  // Which segments attend which way.
  absorbed_.clear();
  for (size_t i = 0; i < batch.num_segments; ++i) {
    const RowSegment& r = batch.segments[i];
    const bool naive = path_ == MlaPath::kNaive || (path_ == MlaPath::kAuto && !kernel_.batch_invariant &&
                                                    mla_prefers_naive(config_, r.start_pos, r.n));
    if (naive) {
      attend_naive(layer, batch, r);
    } else {
      absorbed_.push_back(r);
    }
  }
  if (!absorbed_.empty()) attend_absorbed(layer, batch, absorbed_.data(), absorbed_.size());
  linear(attn_.view().rows(0, m), L.o_proj, out, kernel_);
}

}  // namespace moe
