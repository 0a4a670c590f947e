// Causal grouped-query attention over a paged KV cache (src/moe/transformer/paged_kv_cache.h)
// for several sequences at once: each query row attends over its own sequence's keys,
// one query at a time with the same arithmetic as causal_attention's decode path, so a
// token's output is bitwise independent of chunking and of the other sequences.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/ops/attention.h"

namespace moe {

struct PagedAttentionSeq {
  const float* q;              // [m, num_heads * head_dim], rotated; row t at position start_pos + t
  float* out;                  // [m, num_heads * head_dim]
  int64_t m = 0;
  int64_t start_pos = 0;       // positions [0, start_pos + m) already written to the cache
  const int32_t* block_table;  // blocks covering positions [0, start_pos + m)
};

// k_layer / v_layer: one layer's pools (PagedKVCache::k_layer/v_layer). shape.capacity
// is unused. Work is split over OpenMP threads by (query, head); results do not depend
// on the thread count.
void paged_causal_attention(const PagedAttentionSeq* seqs, size_t num_seqs, const float* k_layer,
                            const float* v_layer, int block_size, const AttentionShape& shape);

}  // namespace moe
