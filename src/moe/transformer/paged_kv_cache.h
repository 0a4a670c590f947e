// KV cache as a pool of fixed-size blocks shared by all running sequences (PagedAttention,
// Kwon et al. SOSP'23): a sequence owns a block table (block ids in position order) and
// position p lives in block table[p / block_size] at offset p % block_size.
//
// Layout per layer and block: K and V as [num_kv_heads, block_size, head_dim] of the
// shape's dtype (f32, or bf16 / f16 with --kv-dtype: rounded to nearest when written).
// Multi-head latent attention keeps one row per position (the latent cache): num_kv_heads
// 1, head_dim kv_lora_rank + qk_rope_head_dim, v_head_dim 0 (no V pool).
// Which block holds what is kv/block_manager.h's (KvBlockManager). Not thread-safe (the
// scheduler's thread owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "moe/core/huge_page_arena.h"
#include "moe/ops/attention.h"
#include "moe/tensor/tensor.h"
#include "moe/transformer/kv_cache.h"

namespace moe {

class PagedKVCache {
 public:
  // shape: rows per position and their dtype (kv_cache_shape(config, dtype); v_dim 0 =
  // no V: MLA's latent cache, f32 only).
  PagedKVCache(int num_layers, const KvCacheShape& shape, int block_size, int64_t num_blocks);

  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  DType dtype() const { return dtype_; }
  // Bytes reserved for the pool (K and V, all layers). The pool is anonymous memory that
  // is touched as blocks are first written, not at construction: a pool sized for a
  // memory budget costs nothing until it is used.
  size_t bytes() const { return k_bytes_ + v_bytes_; }
  // Start of layer `layer`'s K (V) pool as f32 (MOE_CHECK: an f32 cache; MLA's latent
  // rows): block b, KV head h, offset o at ((b * num_kv_heads + h) * block_size + o) * head_dim.
  const float* k_layer(int layer) const;
  const float* v_layer(int layer) const;
  // The pools as [num_blocks, num_kv_heads, block_size, head_dim] views of dtype()
  // (for paged_causal_attention).
  KvView layer(int layer) const;

  // Writes m tokens' keys/values, keys [m, num_kv_heads * head_dim] and values
  // [m, num_kv_heads * v_head_dim] f32 contiguous (values ignored when v_head_dim is 0), at positions [start_pos, start_pos + m) of the sequence whose blocks are
  // `block_table` (which must cover those positions; block ids are checked, MOE_CHECK).
  void write(int layer, const int32_t* block_table, int64_t start_pos, const TensorView& keys,
             const TensorView& values);

  // One block's bytes over all layers: per layer its K rows [num_kv_heads, block_size,
  // head_dim] then its V rows (none for MLA), in dtype(). The disk tier's unit.
  size_t block_bytes() const;
  // Copies block `block`'s bytes to / from `bytes` (block_bytes() of them; MOE_CHECK).
  void read_block(int32_t block, std::span<uint8_t> bytes) const;
  void write_block(int32_t block, std::span<const uint8_t> bytes);

 private:
  int num_layers_, num_kv_heads_, head_dim_, v_head_dim_, block_size_;
  int64_t num_blocks_;
  DType dtype_;
  size_t layer_stride_, v_layer_stride_;  // elements
  size_t k_bytes_, v_bytes_;
  HugePageArena arena_;  // the pool's memory, one chunk (zero pages until first written)
  uint8_t* k_;  // [num_layers * layer_stride] of dtype_
  uint8_t* v_;  // [num_layers * v_layer_stride] of dtype_ (none for MLA)
};

}  // namespace moe
