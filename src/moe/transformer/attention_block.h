// The attention half of a decoder layer behind one small interface, so that blocks of
// other kinds (DeepSeek's multi-head latent attention, a tensor-parallel attention) can
// sit beside today's GQA block (gqa_attention.h) and the decoder loops layers over
// whichever it was built with.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/tensor/tensor.h"
#include "moe/transformer/kv_cache.h"
#include "moe/transformer/paged_kv_cache.h"

namespace moe {

// Rows [row0, row0 + n) of a forward's token rows belong to one sequence, at its
// positions [start_pos, start_pos + n). block_table: the sequence's KV blocks (paged
// cache only), covering positions [0, start_pos + n).
struct RowSegment {
  int64_t row0 = 0;
  int64_t n = 0;
  int64_t start_pos = 0;
  const int32_t* block_table = nullptr;
};

// The sequences of one forward and the KV cache their keys and values go to: either
// the contiguous cache (exactly one segment) or the paged one (any number). Not owned.
// The cache is the block's business: a block of another kind reads its own layout.
struct AttentionBatch {
  const RowSegment* segments = nullptr;
  size_t num_segments = 0;
  KVCache* cache = nullptr;
  PagedKVCache* paged = nullptr;
};

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;

  // Sizes the block's workspaces for forwards of up to max_tokens rows in up to
  // max_segments sequences (allocates; call once, outside the layer loop). Only grows.
  virtual void reserve(int64_t max_tokens, int64_t max_segments) = 0;

  // Layer `layer` over m token rows:
  //   x:   [m, hidden] f32, the normed residual stream (input_layernorm applied)
  //   out: [m, hidden] f32, overwritten with the attention output (after o_proj)
  // Appends the rows' keys and values to batch's cache. m must be within reserve()
  // (MOE_CHECK). Not thread-safe: one forward at a time per block.
  virtual void forward(int layer, const TensorView& x, const AttentionBatch& batch, const TensorView& out) = 0;
};

}  // namespace moe
