#include "moe/transformer/decoder.h"

#include <algorithm>
#include <string>

#include "moe/core/check.h"
#include "moe/core/clock.h"
#include "moe/model/tp_shard.h"
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
      tp_(options.tp),
      dp_(options.dp),
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
  if (tp_.comm != nullptr && tp_.fused_moe) moe_block_->set_tp(tp_.comm);
  if (tp_.comm != nullptr) {  // the vocab shard lm_head() assumes (model/tp_shard.h)
    const VocabShard v = vocab_shard(config.vocab_size, tp_.comm->rank(), tp_.comm->size());
    MOE_CHECK(tp_.vocab_begin == v.begin && weights.lm_head.rows == v.size() && weights.embed_tokens.rows == v.size());
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
  if (dp_driver()) MOE_RETURN_IF_ERROR(dp_announce_chunk());  // the other groups join with no tokens
  if (tp_driver()) MOE_RETURN_IF_ERROR(broadcast_chunk(tokens, m, start_pos, cache, logits != nullptr));
  return run_chunk(tokens, m, start_pos, cache, logits);
}

double Decoder::trace_step_begin() {
  if (trace_ == nullptr) return 0;
  trace_->begin_step();
  return now_seconds();
}

void Decoder::trace_step_end(double t0, int64_t m) {
  if (trace_ != nullptr) trace_->step_span(t0, now_seconds(), m);
}

Status Decoder::run_chunk(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits) {
  const double t0 = trace_step_begin();
  Status st = run_chunk_rows(tokens, m, start_pos, cache, logits);
  trace_step_end(t0, m);
  return st;
}

Status Decoder::run_chunk_rows(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits) {
  if (m == 0) return join_exchanges();
  const RowSegment seg{0, m, start_pos, nullptr};
  MOE_RETURN_IF_ERROR(forward_rows(tokens, AttentionBatch{&seg, 1, cache, nullptr}, m));
  if (logits != nullptr) {
    const TensorView h = h_.view().rows(0, 1);  // [1, hidden]
    rms_norm(x_.view().rows(m - 1, 1), vec_view(weights_.final_norm), static_cast<float>(config_.rms_norm_eps), h);
    MOE_RETURN_IF_ERROR(lm_head(h, logits));
  }
  return ok_status();
}

Status Decoder::join_exchanges() {
  // A rank without tokens this step still joins every layer's exchanges.
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    if (!config_.is_moe_layer(l)) continue;
    if (tp_.comm != nullptr && tp_.fused_moe) {  // the node-local RS/AG and the A2A, with 0 rows
      MOE_RETURN_IF_ERROR(moe_block_->forward_fused(l, TensorView(), TensorView()));
      continue;
    }
    TraceSpan span(trace_, TraceName::kMoe, l);
    if (ep_ != nullptr) MOE_RETURN_IF_ERROR(moe_block_->forward(l, TensorView(), TensorView()));
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
    if (dp_driver() && (s.dp_group < 0 || s.dp_group >= dp_groups())) {
      return invalid_argument("forward_batch: a segment's dp_group " + std::to_string(s.dp_group) +
                              " is not one of the " + std::to_string(dp_groups()) + " DP-attention groups");
    }
  }
  if (m > max_tokens_ || num_segments > max_segments_) {
    return invalid_argument("forward_batch: " + std::to_string(m) + " tokens in " + std::to_string(num_segments) +
                            " segments exceed the decoder's reserve of " + std::to_string(max_tokens_) + " tokens in " +
                            std::to_string(max_segments_) + " segments (Decoder::reserve)");
  }
  if (chunk_hook_) MOE_RETURN_IF_ERROR(chunk_hook_(m));
  if (dp_driver()) return dp_drive_batch(segments, cache);
  if (tp_driver()) MOE_RETURN_IF_ERROR(broadcast_batch(segments, cache));
  return run_batch(segments, cache, m, num_logits);
}

Status Decoder::run_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache, int64_t m,
                          int64_t num_logits) {
  const double t0 = trace_step_begin();
  Status st = run_batch_rows(segments, cache, m, num_logits);
  trace_step_end(t0, m);
  return st;
}

Status Decoder::run_batch_rows(const std::vector<BatchSegment>& segments, PagedKVCache* cache, int64_t m,
                               int64_t num_logits) {
  if (m == 0) return join_exchanges();
  segments_.clear();
  batch_tokens_.clear();
  int64_t row0 = 0;
  for (const BatchSegment& s : segments) {
    if (s.n <= 0) continue;
    segments_.push_back(RowSegment{row0, s.n, s.start_pos, s.block_table});
    batch_tokens_.insert(batch_tokens_.end(), s.tokens, s.tokens + s.n);
    row0 += s.n;
  }
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
      MOE_RETURN_IF_ERROR(lm_head(normed, s.all_logits));
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
  MOE_RETURN_IF_ERROR(lm_head(last_.view().rows(0, num_logits), logits.data_as<float>()));
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
  const TensorView out = block_out_.view().rows(0, m);  // [m, hidden] a block's output (partial under TP)
  MOE_RETURN_IF_ERROR(embed(tokens, m, x));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
    {
      TraceSpan span(trace_, TraceName::kAttention, l);
      rms_norm(x, vec_view(L.input_norm), eps, h);
      attention_->forward(l, h, batch, out);
    }
    TraceSpan span(trace_, TraceName::kMoe, l);
    if (tp_.comm != nullptr && tp_.fused_moe && c.is_moe_layer(l)) {
      // MixServe's fused block (mlp_blocks.h): RS(out) -> x += -> norm -> route -> A2A ->
      // AG / experts / RS -> A2A -> AG(x), in place of AR + MoE + AR.
      MOE_RETURN_IF_ERROR(moe_block_->forward_fused(l, out, x));
      continue;
    }
    MOE_RETURN_IF_ERROR(tp_reduce(out, m));
    add_into(x, out, m * hidden);
    rms_norm(x, vec_view(L.post_attention_norm), eps, h);
    MOE_RETURN_IF_ERROR(ffn_[static_cast<size_t>(l)]->forward(l, h, out));
    MOE_RETURN_IF_ERROR(tp_reduce(out, m));
    add_into(x, out, m * hidden);
  }
  return ok_status();
}

}  // namespace moe
