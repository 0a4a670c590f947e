// The decoder's DP-attention parts (decoder.h, DpOptions): the driver's per-forward plan
// to the other DP groups' leaders, each group's share of a batch, and the logits rows
// the leaders send back to the driver.
#include <algorithm>
#include <string>

#include "moe/transformer/decoder.h"

namespace moe {
namespace {

// The plan: a header of kHeaderSize int64, then a body of header[5] int64:
//   header: kind, block_size, num_blocks, num_segments, num_tokens, body length
//     kind kChunk: a contiguous forward (the driver's group alone; the others join with
//     no tokens), every other field 0; kind kBatch: a paged forward_batch
//   body: per segment [dp_group, n, start_pos, block table length, flags], then the
//         tokens, then the block tables, in segment order.
constexpr int64_t kChunk = 1, kBatch = 2;
constexpr int64_t kWantsLogits = 1, kWantsAllLogits = 2;
constexpr size_t kHeaderSize = 6, kFields = 5;
// The tag of a leader's logits rows sent to the driver.
constexpr int kLogitsTag = 0x4450;

// Logits rows a segment returns: its last token's, then every token's.
int64_t logits_rows(int64_t n, int64_t flags) {
  return ((flags & kWantsLogits) != 0 ? 1 : 0) + ((flags & kWantsAllLogits) != 0 ? n : 0);
}

}  // namespace

Status Decoder::dp_announce_chunk() {
  dp_header_.assign(kHeaderSize, 0);
  dp_header_[0] = kChunk;
  return dp_.comm->broadcast(dp_header_.data(), kHeaderSize * sizeof(int64_t), 0);
}

Status Decoder::run_own_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache) {
  int64_t m = 0, num_logits = 0;
  for (const BatchSegment& s : segments) {
    if (s.n <= 0) continue;
    m += s.n;
    num_logits += s.logits != nullptr;
  }
  if (tp_driver()) MOE_RETURN_IF_ERROR(broadcast_batch(segments, cache));
  return run_batch(segments, cache, m, num_logits);
}

Status Decoder::dp_drive_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache) {
  const int groups = dp_groups();
  const int64_t block_size = cache != nullptr ? cache->block_size() : 0;
  dp_header_.assign(kHeaderSize, 0);
  dp_body_.clear();
  dp_header_[0] = kBatch;
  dp_header_[1] = block_size;
  dp_header_[2] = cache != nullptr ? cache->num_blocks() : 0;
  std::vector<const BatchSegment*> live;
  std::vector<BatchSegment> own;
  std::vector<int64_t> rows(static_cast<size_t>(groups), 0);  // logits rows each group returns
  for (const BatchSegment& s : segments) {
    if (s.n <= 0) continue;
    const int64_t table =
        s.block_table != nullptr ? (s.start_pos + s.n + block_size - 1) / std::max<int64_t>(1, block_size) : 0;
    const int64_t flags = (s.logits ? kWantsLogits : 0) | (s.all_logits ? kWantsAllLogits : 0);
    dp_body_.insert(dp_body_.end(), {s.dp_group, s.n, s.start_pos, table, flags});
    rows[static_cast<size_t>(s.dp_group)] += logits_rows(s.n, flags);
    ++dp_header_[3];
    dp_header_[4] += s.n;
    live.push_back(&s);
    if (s.dp_group == 0) own.push_back(s);
  }
  for (const BatchSegment* s : live) dp_body_.insert(dp_body_.end(), s->tokens, s->tokens + s->n);
  for (size_t i = 0; i < live.size(); ++i) {
    const int64_t table = dp_body_[i * kFields + 3];
    if (table > 0) dp_body_.insert(dp_body_.end(), live[i]->block_table, live[i]->block_table + table);
  }
  dp_header_[5] = static_cast<int64_t>(dp_body_.size());
  MOE_RETURN_IF_ERROR(dp_.comm->broadcast(dp_header_.data(), kHeaderSize * sizeof(int64_t), 0));
  if (!dp_body_.empty()) {
    MOE_RETURN_IF_ERROR(dp_.comm->broadcast(dp_body_.data(), dp_body_.size() * sizeof(int64_t), 0));
  }
  MOE_RETURN_IF_ERROR(run_own_batch(own, cache));
  // The other groups' rows, in their segments' order: last-token logits, then all rows.
  const int64_t vocab = config_.vocab_size;
  for (int g = 1; g < groups; ++g) {
    const int64_t n = rows[static_cast<size_t>(g)];
    if (n == 0) continue;
    if (dp_logits_.size() < static_cast<size_t>(n * vocab)) dp_logits_.resize(static_cast<size_t>(n * vocab));
    MOE_RETURN_IF_ERROR(dp_.comm->recv(dp_logits_.data(), static_cast<size_t>(n * vocab) * sizeof(float), g, kLogitsTag)
                            .with_context("DP-attention: logits of group " + std::to_string(g)));
    const float* src = dp_logits_.data();
    for (const BatchSegment* s : live) {
      if (s->dp_group != g) continue;
      if (s->logits != nullptr) {
        std::copy_n(src, vocab, s->logits);
        src += vocab;
      }
      if (s->all_logits != nullptr) {
        std::copy_n(src, s->n * vocab, s->all_logits);
        src += s->n * vocab;
      }
    }
  }
  return ok_status();
}

Status Decoder::dp_follow(const TpFollowerCaches& caches) {
  if (dp_.comm == nullptr || dp_.comm->rank() == 0) {
    return failed_precondition("Decoder::dp_follow is for the leaders of DP-attention groups > 0");
  }
  dp_header_.assign(kHeaderSize, 0);
  MOE_RETURN_IF_ERROR(dp_.comm->broadcast(dp_header_.data(), kHeaderSize * sizeof(int64_t), 0));
  const int64_t kind = dp_header_[0], a = dp_header_[1], b = dp_header_[2], num_segments = dp_header_[3],
                m = dp_header_[4], body = dp_header_[5];
  const bool sane = (kind == kChunk || kind == kBatch) && a >= 0 && b >= 0 && num_segments >= 0 && m >= 0 &&
                    body >= num_segments * static_cast<int64_t>(kFields) + m;
  if (!sane) return invalid_argument("dp_follow: malformed plan header from the DP-attention driver");
  if (kind == kChunk) return forward_chunk(nullptr, 0, 0, nullptr, nullptr);  // the driver's group alone
  dp_body_.assign(static_cast<size_t>(body), 0);
  if (body > 0) MOE_RETURN_IF_ERROR(dp_.comm->broadcast(dp_body_.data(), dp_body_.size() * sizeof(int64_t), 0));
  const int me = dp_.comm->rank();
  const int64_t vocab = config_.vocab_size;
  const int64_t* seg = dp_body_.data();
  const int64_t* tok = seg + num_segments * kFields;
  int64_t table_total = 0, tokens_seen = 0, my_tokens = 0, my_segments = 0, my_rows = 0;
  for (int64_t i = 0; i < num_segments; ++i) {
    const int64_t* f = seg + i * kFields;
    if (f[0] < 0 || f[0] >= dp_groups() || f[1] <= 0 || f[2] < 0 ||
        f[3] < (f[2] + f[1] + a - 1) / std::max<int64_t>(a, 1)) {
      return invalid_argument("dp_follow: malformed segment from the DP-attention driver (group in range, block "
                              "table covering its positions)");
    }
    table_total += f[3];
    tokens_seen += f[1];
    if (f[0] != me) continue;
    my_tokens += f[1];
    ++my_segments;
    my_rows += logits_rows(f[1], f[4]);
  }
  if (tokens_seen != m || body != num_segments * static_cast<int64_t>(kFields) + m + table_total) {
    return invalid_argument("dp_follow: the DP-attention driver's segments do not add up");
  }
  dp_tokens_.assign(tok, tok + m);
  dp_tables_.assign(tok + m, tok + m + table_total);
  for (int32_t t : dp_tables_) {
    if (t < 0 || t >= b) return invalid_argument("dp_follow: block id " + std::to_string(t) + " out of range");
  }
  // Made on the first batch even without tokens of this group (so that a warm-up step
  // allocates every group's pool, and its TP followers' with it).
  PagedKVCache* cache = a > 0 && caches.paged ? caches.paged(a, b) : nullptr;
  if (my_tokens > 0) {
    if (cache == nullptr) {
      return failed_precondition("dp_follow: no paged KV cache of " + std::to_string(b) + " blocks of " +
                                 std::to_string(a));
    }
  }
  if (my_tokens > max_tokens_ || my_segments > max_segments_) {
    reserve(std::max(my_tokens, max_tokens_), std::max(my_segments, max_segments_));
  }
  if (dp_logits_.size() < static_cast<size_t>(my_rows * vocab)) dp_logits_.resize(static_cast<size_t>(my_rows * vocab));
  std::vector<BatchSegment> own;
  int64_t t0 = 0, k0 = 0, row = 0;
  for (int64_t i = 0; i < num_segments; ++i) {
    const int64_t* f = seg + i * kFields;
    if (f[0] == me) {
      BatchSegment s;
      s.tokens = dp_tokens_.data() + t0;
      s.n = f[1];
      s.start_pos = f[2];
      s.block_table = f[3] > 0 ? dp_tables_.data() + k0 : nullptr;
      if (f[4] & kWantsLogits) s.logits = dp_logits_.data() + (row++) * vocab;
      if (f[4] & kWantsAllLogits) {
        s.all_logits = dp_logits_.data() + row * vocab;
        row += f[1];
      }
      own.push_back(s);
    }
    t0 += f[1];
    k0 += f[3];
  }
  MOE_RETURN_IF_ERROR(run_own_batch(own, cache));
  if (my_rows == 0) return ok_status();
  return dp_.comm->send(dp_logits_.data(), static_cast<size_t>(my_rows * vocab) * sizeof(float), 0, kLogitsTag);
}

}  // namespace moe
