// The decoder's tensor-parallel parts (decoder.h, TpOptions): the vocab-parallel
// embedding and lm_head, the all-reduce of partial block outputs, and the driver's
// batch broadcast that tp_follow() replays on the followers.
#include <algorithm>
#include <cstring>
#include <string>

#include "moe/core/check.h"
#include "moe/model/tp_shard.h"
#include "moe/ops/linear.h"
#include "moe/transformer/decoder.h"

namespace moe {
namespace {

// The broadcast: a header of kHeaderSize int64, then a body of header[5] int64:
//   header: kind, geometry a, geometry b, num_segments, num_tokens, body length
//     kind kContiguous: a = the cache's capacity (0 = none), b = 0
//     kind kPaged:      a = block_size, b = num_blocks (0, 0 = no cache)
//   body: per segment [n, start_pos, block table length, flags], then the tokens, then
//         the block tables, in segment order.
constexpr int64_t kContiguous = 1, kPaged = 2;
constexpr int64_t kWantsLogits = 1, kWantsAllLogits = 2;
constexpr size_t kHeaderSize = 6, kSegmentFields = 4;

}  // namespace

bool Decoder::tp_driver() const { return tp_.comm != nullptr && tp_.driver_group && tp_.comm->rank() == 0; }

Status Decoder::embed(const int* tokens, int64_t m, const TensorView& x) {
  const Weight2D& e = weights_.embed_tokens;
  const size_t hidden = static_cast<size_t>(config_.hidden_size);
  const int64_t begin = tp_.comm != nullptr ? tp_.vocab_begin : 0, end = begin + e.rows;
  for (int64_t t = 0; t < m; ++t) {
    const int64_t token = tokens[t];
    if (token >= begin && token < end) {
      convert_to_f32(e.row(token - begin), e.dtype, x.row<float>(t), hidden);
    } else {
      std::fill_n(x.row<float>(t), hidden, 0.0f);  // another TP rank's row
    }
  }
  if (tp_.comm == nullptr) return ok_status();
  return tp_.comm->allreduce_sum(x.data_as<float>(), static_cast<size_t>(m) * hidden);
}

Status Decoder::tp_reduce(const TensorView& out, int64_t m) {
  if (tp_.comm == nullptr) return ok_status();
  return tp_.comm->allreduce_sum(out.data_as<float>(), static_cast<size_t>(m * config_.hidden_size));
}

Status Decoder::lm_head(const TensorView& normed, float* logits) {
  const int64_t rows = normed.dim(0), vocab = config_.vocab_size;
  if (tp_.comm == nullptr) {
    linear(normed, weights_.lm_head, TensorView::f32(logits, {rows, vocab}), kernel_);
    return ok_status();
  }
  // Local logits [rows, local] -> padded blocks [rows, per] -> all-gathered [tp, rows,
  // per] -> each rank's columns of [rows, vocab].
  const int tp = tp_.comm->size();
  const int64_t per = (vocab + tp - 1) / tp, local = weights_.lm_head.rows;
  const size_t block = static_cast<size_t>(rows * per);
  if (tp_local_logits_.size() < block) tp_local_logits_.resize(block);
  if (tp_gathered_logits_.size() < block * static_cast<size_t>(tp)) tp_gathered_logits_.resize(block * tp);
  float* padded = tp_local_logits_.data();
  if (local > 0) linear(normed, weights_.lm_head, TensorView::f32(padded, {rows, local}), kernel_);
  for (int64_t r = rows - 1; r >= 0; --r) {  // spread rows to stride per, back to front (in place)
    std::memmove(padded + r * per, padded + r * local, sizeof(float) * static_cast<size_t>(local));
    std::fill(padded + r * per + local, padded + (r + 1) * per, 0.0f);
  }
  MOE_RETURN_IF_ERROR(tp_.comm->allgather(padded, block * sizeof(float), tp_gathered_logits_.data()));
  for (int b = 0; b < tp; ++b) {
    const VocabShard s = vocab_shard(vocab, b, tp);
    const float* src = tp_gathered_logits_.data() + static_cast<size_t>(b) * block;
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(src + r * per, s.size(), logits + r * vocab + s.begin);
    }
  }
  return ok_status();
}

Status Decoder::broadcast_plan(std::vector<int64_t>* header, std::vector<int64_t>* body) {
  MOE_CHECK(header->size() == kHeaderSize);
  (*header)[5] = static_cast<int64_t>(body->size());
  MOE_RETURN_IF_ERROR(tp_.comm->broadcast(header->data(), kHeaderSize * sizeof(int64_t), 0));
  if (body->empty()) return ok_status();
  return tp_.comm->broadcast(body->data(), body->size() * sizeof(int64_t), 0);
}

Status Decoder::broadcast_chunk(const int* tokens, int64_t m, int64_t start_pos, const KVCache* cache,
                                bool want_logits) {
  tp_header_.assign(kHeaderSize, 0);
  tp_body_.clear();
  tp_header_[0] = kContiguous;
  tp_header_[1] = cache != nullptr ? cache->capacity() : 0;
  if (m > 0) {
    tp_header_[3] = 1;
    tp_header_[4] = m;
    tp_body_ = {m, start_pos, 0, want_logits ? kWantsLogits : 0};
    tp_body_.insert(tp_body_.end(), tokens, tokens + m);
  }
  return broadcast_plan(&tp_header_, &tp_body_);
}

Status Decoder::broadcast_batch(const std::vector<BatchSegment>& segments, const PagedKVCache* cache) {
  tp_header_.assign(kHeaderSize, 0);
  tp_body_.clear();
  tp_header_[0] = kPaged;
  if (cache != nullptr) {
    tp_header_[1] = cache->block_size();
    tp_header_[2] = cache->num_blocks();
  }
  const int64_t block_size = std::max<int64_t>(1, tp_header_[1]);
  for (const BatchSegment& s : segments) {
    if (s.n <= 0) continue;
    const int64_t table = s.block_table != nullptr ? (s.start_pos + s.n + block_size - 1) / block_size : 0;
    tp_body_.insert(tp_body_.end(), {s.n, s.start_pos, table,
                                     (s.logits ? kWantsLogits : 0) | (s.all_logits ? kWantsAllLogits : 0)});
    ++tp_header_[3];
    tp_header_[4] += s.n;
  }
  for (const BatchSegment& s : segments) {
    if (s.n > 0) tp_body_.insert(tp_body_.end(), s.tokens, s.tokens + s.n);
  }
  for (size_t i = 0, k = 0; i < segments.size(); ++i) {
    const BatchSegment& s = segments[i];
    if (s.n <= 0) continue;
    const int64_t table = tp_body_[k * kSegmentFields + 2];
    if (table > 0) tp_body_.insert(tp_body_.end(), s.block_table, s.block_table + table);
    ++k;
  }
  return broadcast_plan(&tp_header_, &tp_body_);
}

Status Decoder::tp_follow(const TpFollowerCaches& caches) {
  if (tp_.comm == nullptr || !tp_.driver_group || tp_.comm->rank() == 0) {
    return failed_precondition("Decoder::tp_follow is for TP ranks > 0 of the driver's TP group");
  }
  tp_header_.assign(kHeaderSize, 0);
  MOE_RETURN_IF_ERROR(tp_.comm->broadcast(tp_header_.data(), kHeaderSize * sizeof(int64_t), 0));
  const int64_t kind = tp_header_[0], a = tp_header_[1], b = tp_header_[2], num_segments = tp_header_[3],
                m = tp_header_[4], body = tp_header_[5];
  const bool sane = (kind == kContiguous || kind == kPaged) && a >= 0 && b >= 0 && num_segments >= 0 && m >= 0 &&
                    body >= num_segments * static_cast<int64_t>(kSegmentFields) + m;
  if (!sane) return invalid_argument("tp_follow: malformed batch header from the TP driver");
  tp_body_.assign(static_cast<size_t>(body), 0);
  if (body > 0) MOE_RETURN_IF_ERROR(tp_.comm->broadcast(tp_body_.data(), tp_body_.size() * sizeof(int64_t), 0));
  const int64_t vocab = config_.vocab_size;
  const int64_t* seg = tp_body_.data();
  const int64_t* tok = seg + num_segments * kSegmentFields;
  tp_tokens_.assign(tok, tok + m);
  if (kind == kContiguous) {
    if (num_segments > 1) return invalid_argument("tp_follow: a contiguous forward of several segments");
    KVCache* cache = nullptr;
    if (a > 0) {
      cache = caches.contiguous ? caches.contiguous(a) : nullptr;
      if (cache == nullptr) return failed_precondition("tp_follow: no contiguous KV cache of capacity " + std::to_string(a));
    }
    if (m > 0 && cache == nullptr) return invalid_argument("tp_follow: tokens without a KV cache");
    const bool want = num_segments == 1 && (seg[3] & kWantsLogits) != 0;
    if (tp_scratch_logits_.size() < static_cast<size_t>(vocab)) tp_scratch_logits_.resize(static_cast<size_t>(vocab));
    return run_chunk(tp_tokens_.data(), m, num_segments == 1 ? seg[1] : 0, cache, want ? tp_scratch_logits_.data() : nullptr);
  }
  PagedKVCache* cache = nullptr;
  if (a > 0) {
    cache = caches.paged ? caches.paged(a, b) : nullptr;
    if (cache == nullptr) {
      return failed_precondition("tp_follow: no paged KV cache of " + std::to_string(b) + " blocks of " +
                                 std::to_string(a));
    }
  }
  if (m > 0 && cache == nullptr) return invalid_argument("tp_follow: tokens without a KV cache");
  // Segments with their tokens, tables and scratch logits (the follower's are discarded).
  int64_t table_total = 0, num_logits = 0, all_rows = 0, tokens_seen = 0;
  for (int64_t i = 0; i < num_segments; ++i) {
    const int64_t* f = seg + i * kSegmentFields;
    if (f[0] <= 0 || f[2] < 0) return invalid_argument("tp_follow: malformed segment from the TP driver");
    table_total += f[2];
    tokens_seen += f[0];
    num_logits += (f[3] & kWantsLogits) != 0;
    all_rows = std::max(all_rows, (f[3] & kWantsAllLogits) != 0 ? f[0] : 0);
  }
  if (tokens_seen != m || body != num_segments * static_cast<int64_t>(kSegmentFields) + m + table_total) {
    return invalid_argument("tp_follow: the TP driver's segments do not add up");
  }
  const int64_t* tables = tok + m;
  tp_tables_.assign(tables, tables + table_total);
  for (int64_t t : tp_tables_) {
    if (t < 0 || t >= b) return invalid_argument("tp_follow: block id " + std::to_string(t) + " out of range");
  }
  const size_t scratch = static_cast<size_t>(std::max<int64_t>(1, std::max(num_logits, all_rows)) * vocab);
  if (tp_scratch_logits_.size() < scratch) tp_scratch_logits_.resize(scratch);
  if (m > max_tokens_ || num_segments > max_segments_) reserve(std::max(m, max_tokens_), std::max(num_segments, max_segments_));
  std::vector<BatchSegment> segments(static_cast<size_t>(num_segments));
  int64_t t0 = 0, k0 = 0, li = 0;
  for (int64_t i = 0; i < num_segments; ++i) {
    const int64_t* f = seg + i * kSegmentFields;
    BatchSegment& s = segments[static_cast<size_t>(i)];
    s.tokens = tp_tokens_.data() + t0;
    s.n = f[0];
    s.start_pos = f[1];
    s.block_table = f[2] > 0 ? tp_tables_.data() + k0 : nullptr;
    if (f[3] & kWantsLogits) s.logits = tp_scratch_logits_.data() + (li++) * vocab;
    if (f[3] & kWantsAllLogits) s.all_logits = tp_scratch_logits_.data();
    t0 += f[0];
    k0 += f[2];
  }
  return run_batch(segments, cache, m, num_logits);
}

}  // namespace moe
