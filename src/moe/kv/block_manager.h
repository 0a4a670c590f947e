// The KV block manager: which block of the paged KV pool (transformer/paged_kv_cache.h)
// holds which positions of which sequence, and which blocks hold a reusable prefix.
// Plain data over block ids; the pool's bytes are never touched here.
//
// - Blocks are reference-counted; each sequence has a block table (ids in position order)
//   that grows as the sequence does (ensure()).
// - Automatic prefix caching (vLLM's design): a full block is keyed by
//   XXH3-128(parent key || its block_size token ids); the first block's parent is the
//   sequence's root key, derived from everything else that changes the KV (the model,
//   the KV dtype, the kernels, the request's cache_salt, the DP group). Equal keys mean
//   equal prefixes. On a hit the stored token ids are compared too, so a hash collision
//   can never serve another prompt's KV. Hits are shared read-only: a sequence writes
//   only positions at or past its cached prefix, and only full blocks are shared.
// - Freed blocks that hold a cached prefix stay cached, in an LRU queue, until their
//   block is needed; a sequence's blocks are queued tail first, so the tail of a prefix
//   is evicted before its head. Blocks that hold no prefix are reused first.
//
// Not thread-safe: one thread (the scheduler's) owns a manager.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "moe/store/content_hash.h"

namespace moe {

using KvBlockHash = Hash128;

struct KvBlockHashOf {
  size_t operator()(const KvBlockHash& h) const { return static_cast<size_t>(h.low ^ (h.high * 0x9E3779B97F4A7C15ull)); }
};

// The key of a full block: XXH3-128 over the parent's 16 bytes then the token ids as
// little-endian int32.
KvBlockHash kv_block_hash(const KvBlockHash& parent, std::span<const int32_t> tokens);
// A root key: XXH3-128 of `text` (the caller's description of what changes the KV).
KvBlockHash kv_root_hash(std::string_view text);

struct KvBlockManagerOptions {
  int64_t num_blocks = 0;  // > 0
  int block_size = 16;     // tokens per block, > 0
  bool enable_prefix_caching = true;
  // Tests: replaces kv_block_hash (e.g. one that collides) when set.
  std::function<KvBlockHash(const KvBlockHash&, std::span<const int32_t>)> hash_for_test;
};

struct KvBlockManagerCounters {
  int64_t queried_tokens = 0;  // prompt tokens looked up (record_lookup())
  int64_t hit_tokens = 0;      // of those, found cached (record_lookup())
  int64_t collisions = 0;      // key found but token ids differed (never served)
  int64_t evictions = 0;       // cached blocks reused for other positions
};

class KvBlockManager {
 public:
  using SeqId = uint64_t;

  explicit KvBlockManager(const KvBlockManagerOptions& options);

  int block_size() const { return block_size_; }
  int64_t total_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  // Blocks that ensure() can hand out: never-cached free ones plus unreferenced cached ones.
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  // Blocks referenced by a sequence.
  int64_t used_blocks() const { return total_blocks() - free_blocks(); }
  // Unreferenced blocks that still hold a cached prefix.
  int64_t cached_free_blocks() const { return static_cast<int64_t>(lru_.size()); }
  bool prefix_caching() const { return caching_; }
  const KvBlockManagerCounters& counters() const { return counters_; }
  static int64_t blocks_for(int64_t tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

  // Starts sequence `id` (MOE_CHECK: not started) with root key `root`. With caching on
  // and `lookup`, takes the longest cached prefix of `tokens` in whole blocks, but at
  // most `max_cached` tokens (the caller keeps at least one token to compute), and
  // returns its length in tokens (a multiple of block_size; 0 without caching). The
  // table then holds those blocks; nothing else is allocated.
  int64_t begin(SeqId id, std::span<const int32_t> tokens, int64_t max_cached, const KvBlockHash& root, bool lookup);
  // Adds a lookup's figures to counters() (the caller counts a prompt once, not at each
  // retry of its admission): `queried` prompt tokens, `hit` of them cached.
  void record_lookup(int64_t queried, int64_t hit) {
    counters_.queried_tokens += queried;
    counters_.hit_tokens += hit;
  }
  // Blocks sequence `id` needs beyond its table to hold `tokens` positions.
  int64_t blocks_needed(SeqId id, int64_t tokens) const;
  // Grows the table of `id` to cover `tokens` positions; false (nothing taken) if fewer
  // blocks are free. Free never-cached blocks go first, then the least recently used
  // cached ones (evicted: their keys are forgotten).
  bool ensure(SeqId id, int64_t tokens);
  // The first `computed` positions of `tokens` (the sequence's ids so far) now hold their
  // K/V: each block they fill becomes a cached prefix block (unless caching is off, or an
  // equal block is cached already, in which case this one stays private).
  void commit(SeqId id, std::span<const int32_t> tokens, int64_t computed);
  // Drops the sequence: its blocks' references go; unreferenced cached blocks join the
  // LRU queue (tail block first), the others the free list. No-op for an unknown id.
  void free(SeqId id);
  bool has(SeqId id) const { return seqs_.count(id) > 0; }
  // The block table of `id` (MOE_CHECK: started). Valid until its next ensure() / free().
  const std::vector<int32_t>& table(SeqId id) const;
  // Forgets every cached prefix (vLLM's /reset_prefix_cache). Blocks in use stay with
  // their sequences; the unreferenced ones become plain free blocks.
  void reset_prefix_cache();

  // Called for a block just cached by commit(), with its key and token ids (the disk
  // tier writes it through). The pool's bytes for block `block` are final then.
  std::function<void(const KvBlockHash&, int32_t block, std::span<const int32_t> tokens)> on_cached;
  // Called by begin() on a miss with caching on: a second tier may supply the block.
  // Given the key and token ids of the next block of the prefix, it returns true after
  // it wrote that block's K/V into pool block `block` (one of this manager's free blocks,
  // handed to it), else false. Unset: no second tier.
  std::function<bool(const KvBlockHash&, std::span<const int32_t> tokens, int32_t block)> load_missing;

 private:
  struct Block {
    int32_t refs = 0;
    bool cached = false;
    KvBlockHash key;
    std::vector<int32_t> tokens;          // block_size ids while cached
    std::list<int32_t>::iterator in_lru;  // valid while cached and refs == 0
  };
  struct Seq {
    std::vector<int32_t> table;
    std::vector<KvBlockHash> keys;  // keys of the first keys.size() full blocks
    KvBlockHash root;
    size_t committed_blocks = 0;    // full blocks already offered to the cache
  };
  KvBlockHash hash(const KvBlockHash& parent, std::span<const int32_t> tokens) const;
  // One free block (caller checked free_blocks() > 0), referenced once.
  int32_t take();
  void ref(int32_t b);
  Seq& seq(SeqId id);
  const Seq& seq(SeqId id) const;

  int block_size_;
  bool caching_;
  std::function<KvBlockHash(const KvBlockHash&, std::span<const int32_t>)> hash_for_test_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // never-cached (or forgotten) unreferenced blocks; popped from the back
  std::list<int32_t> lru_;     // unreferenced cached blocks, least recently used first
  std::unordered_map<KvBlockHash, int32_t, KvBlockHashOf> cached_;
  std::unordered_map<SeqId, Seq> seqs_;
  KvBlockManagerCounters counters_;
};

}  // namespace moe
