#include "moe/transformer/decoder.h"

#include <algorithm>
#include <string>

#include "moe/core/check.h"
#include "moe/ops/linear.h"
#include "moe/ops/norm.h"
#include "moe/transformer/gqa_attention.h"

namespace moe {
namespace {

TensorView vec_view(const std::vector<float>& v) {
  return TensorView::f32(v.data(), {static_cast<int64_t>(v.size())});
}

// x[i] += y[i] over the first n elements.
void add_into(const TensorView& x, const TensorView& y, int64_t n) {
  float* xp = x.data_as<float>();
  const float* yp = y.data_as<const float>();
  for (int64_t i = 0; i < n; ++i) xp[i] += yp[i];
}

}  // namespace

Decoder::Decoder(const ModelConfig& config, const ModelWeights& weights, const DecoderOptions& options)
    : config_(config),
      weights_(weights),
      ep_(options.ep),
      kernel_(options.kernel),
      attention_(config.mla.enabled()
                     ? std::unique_ptr<AttentionBlock>(
                           std::make_unique<MlaAttention>(config, weights, options.kernel, options.mla_path))
                     : std::make_unique<GqaAttention>(config, weights, options.kernel)),
      moe_block_(std::make_unique<MoeBlock>(config, weights, options.ep, options.kernel, kMaxChunk)),
      dense_block_(std::make_unique<DenseMlpBlock>(weights, options.kernel)) {
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    ffn_.push_back(config.is_moe_layer(l) ? static_cast<FeedForwardBlock*>(moe_block_.get()) : dense_block_.get());
  }
  reserve(kMaxChunk, 1);
}

Decoder::~Decoder() = default;

void Decoder::reserve(int64_t max_tokens, int64_t max_segments) {
  const int64_t hidden = config_.hidden_size, vocab = config_.vocab_size;
  if (max_tokens > max_tokens_) {
    x_ = Tensor::empty(DType::kF32, {max_tokens, hidden});
    h_ = Tensor::empty(DType::kF32, {max_tokens, hidden});
    block_out_ = Tensor::empty(DType::kF32, {max_tokens, hidden});
    batch_tokens_.reserve(static_cast<size_t>(max_tokens));
    max_tokens_ = max_tokens;
  }
  if (max_segments > max_segments_) {
    last_ = Tensor::empty(DType::kF32, {max_segments, hidden});
    batch_logits_ = Tensor::empty(DType::kF32, {max_segments, vocab});
    segments_.reserve(static_cast<size_t>(max_segments));
    max_segments_ = max_segments;
  }
  attention_->reserve(max_tokens_, max_segments_);
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
  MOE_CHECK(m >= 0 && m <= kMaxChunk);
  if (m == 0) {
    // A rank without tokens this step still joins every layer's exchanges.
    if (ep_ != nullptr) {
      for (int l = 0; l < config_.num_hidden_layers; ++l) {
        if (!config_.is_moe_layer(l)) continue;
        MOE_RETURN_IF_ERROR(moe_block_->forward(l, TensorView(), TensorView()));
      }
    }
    return ok_status();
  }
  const RowSegment seg{0, m, start_pos, nullptr};
  MOE_RETURN_IF_ERROR(forward_rows(tokens, AttentionBatch{&seg, 1, cache, nullptr}, m));
  if (logits != nullptr) {
    const TensorView h = h_.view().rows(0, 1);  // [1, hidden]
    rms_norm(x_.view().rows(m - 1, 1), vec_view(weights_.final_norm), static_cast<float>(config_.rms_norm_eps), h);
    linear(h, weights_.lm_head, TensorView::f32(logits, {1, config_.vocab_size}), kernel_);
  }
  return ok_status();
}

Status Decoder::forward_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache) {
  int64_t m = 0, num_segments = 0, num_logits = 0;
  for (const BatchSegment& s : segments) {
    if (s.n <= 0) continue;
    m += s.n;
    ++num_segments;
    num_logits += s.logits != nullptr;
  }
  if (m > max_tokens_ || num_segments > max_segments_) {
    return invalid_argument("forward_batch: " + std::to_string(m) + " tokens in " + std::to_string(num_segments) +
                            " segments exceed the decoder's reserve of " + std::to_string(max_tokens_) + " tokens in " +
                            std::to_string(max_segments_) + " segments (Decoder::reserve)");
  }
  segments_.clear();
  batch_tokens_.clear();
  int64_t row0 = 0;
  for (const BatchSegment& s : segments) {
    if (s.n <= 0) continue;
    segments_.push_back(RowSegment{row0, s.n, s.start_pos, s.block_table});
    batch_tokens_.insert(batch_tokens_.end(), s.tokens, s.tokens + s.n);
    row0 += s.n;
  }
  if (chunk_hook_) MOE_RETURN_IF_ERROR(chunk_hook_(m));
  if (m == 0) return forward_chunk(nullptr, 0, 0, nullptr, nullptr);
  MOE_RETURN_IF_ERROR(
      forward_rows(batch_tokens_.data(), AttentionBatch{segments_.data(), segments_.size(), nullptr, cache}, m));
  const int64_t vocab = config_.vocab_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  int64_t row = 0;
  for (const BatchSegment& s : segments) {  // every row of segments that want them all
    if (s.n <= 0) continue;
    if (s.all_logits != nullptr) {
      const TensorView normed = h_.view().rows(row, s.n);
      rms_norm(x_.view().rows(row, s.n), vec_view(weights_.final_norm), eps, normed);
      linear(normed, weights_.lm_head, TensorView::f32(s.all_logits, {s.n, vocab}), kernel_);
    }
    row += s.n;
  }
  // The final norm + lm_head over the segments' last rows, as one [S, hidden] call.
  if (num_logits == 0) return ok_status();
  int64_t i = 0;
  row = 0;
  for (const BatchSegment& s : segments) {
    if (s.n <= 0) continue;
    row += s.n;
    if (s.logits == nullptr) continue;
    rms_norm(x_.view().rows(row - 1, 1), vec_view(weights_.final_norm), eps, last_.view().rows(i, 1));
    ++i;
  }
  const TensorView logits = batch_logits_.view().rows(0, num_logits);  // [num_logits, vocab]
  linear(last_.view().rows(0, num_logits), weights_.lm_head, logits, kernel_);
  i = 0;
  for (const BatchSegment& s : segments) {
    if (s.n <= 0 || s.logits == nullptr) continue;
    std::copy_n(logits.row<const float>(i), vocab, s.logits);
    ++i;
  }
  return ok_status();
}

Status Decoder::forward_rows(const int* tokens, const AttentionBatch& batch, int64_t m) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  MOE_CHECK(m <= max_tokens_);
  const TensorView x = x_.view().rows(0, m);          // [m, hidden] residual stream
  const TensorView h = h_.view().rows(0, m);          // [m, hidden] normed
  const TensorView out = block_out_.view().rows(0, m);  // [m, hidden] a block's output
  for (int64_t t = 0; t < m; ++t) {
    convert_to_f32(weights_.embed_tokens.row(tokens[t]), weights_.embed_tokens.dtype, x.row<float>(t),
                   static_cast<size_t>(hidden));
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
    rms_norm(x, vec_view(L.input_norm), eps, h);
    attention_->forward(l, h, batch, out);
    add_into(x, out, m * hidden);
    rms_norm(x, vec_view(L.post_attention_norm), eps, h);
    MOE_RETURN_IF_ERROR(ffn_[static_cast<size_t>(l)]->forward(l, h, out));
    add_into(x, out, m * hidden);
  }
  return ok_status();
}

}  // namespace moe
