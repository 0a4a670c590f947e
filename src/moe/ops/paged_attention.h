// Causal grouped-query attention over a paged KV cache (src/moe/transformer/paged_kv_cache.h)
// for several sequences at once: each query row attends over its own sequence's keys,
// one query at a time with the same arithmetic as causal_attention's decode path, so a
// token's output is bitwise independent of chunking and of the other sequences.
#pragma once

#include <cstddef>

#include "moe/ops/attention.h"
#include "moe/ops/attention_cpu.h"

namespace moe {

//   seqs:  [num_seqs] sequences (PagedAttentionSeq: q / out rows [m, num_heads * head_dim]
//          f32, positions, block table); q and out must not overlap.
//   pools: one layer's block pools (PagedKVCache::layer), k and v
//          [num_blocks, num_kv_heads, block_size, head_dim], both f32, bf16 or f16,
//          contiguous (16-bit rows are read directly, widened to f32 in registers).
// Block ids are not checked here (PagedKVCache::write checks them). Work is split over
// OpenMP threads by (query, head); results do not depend on the thread count.
void paged_causal_attention(const PagedAttentionSeq* seqs, size_t num_seqs, const KvView& pools, int num_heads);

}  // namespace moe
