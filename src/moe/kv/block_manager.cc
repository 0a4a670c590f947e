#include "moe/kv/block_manager.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "moe/core/check.h"

namespace moe {

KvBlockHash kv_block_hash(const KvBlockHash& parent, std::span<const int32_t> tokens) {
  Hasher128 h;
  const uint64_t p[2] = {parent.high, parent.low};
  h.update(p, sizeof(p));
  h.update(tokens.data(), tokens.size_bytes());
  return h.digest();
}

KvBlockHash kv_root_hash(std::string_view text) { return hash_bytes(text.data(), text.size()); }

KvBlockManager::KvBlockManager(const KvBlockManagerOptions& o)
    : block_size_(o.block_size),
      caching_(o.enable_prefix_caching),
      hash_for_test_(o.hash_for_test),
      blocks_(static_cast<size_t>(o.num_blocks)) {
  MOE_CHECK(o.num_blocks > 0 && o.block_size > 0);
  free_.reserve(static_cast<size_t>(o.num_blocks));
  // Popped from the back: low ids first.
  for (int64_t b = o.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

KvBlockHash KvBlockManager::hash(const KvBlockHash& parent, std::span<const int32_t> tokens) const {
  return hash_for_test_ ? hash_for_test_(parent, tokens) : kv_block_hash(parent, tokens);
}

KvBlockManager::Seq& KvBlockManager::seq(SeqId id) {
  auto it = seqs_.find(id);
  MOE_CHECK(it != seqs_.end());
  return it->second;
}

const KvBlockManager::Seq& KvBlockManager::seq(SeqId id) const {
  auto it = seqs_.find(id);
  MOE_CHECK(it != seqs_.end());
  return it->second;
}

const std::vector<int32_t>& KvBlockManager::table(SeqId id) const { return seq(id).table; }

void KvBlockManager::ref(int32_t b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.refs++ == 0 && blk.cached) lru_.erase(blk.in_lru);
}

int32_t KvBlockManager::take() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    MOE_CHECK(!lru_.empty());
    b = lru_.front();
    lru_.pop_front();
    Block& blk = blocks_[static_cast<size_t>(b)];
    cached_.erase(blk.key);
    blk.cached = false;
    blk.tokens.clear();
    ++counters_.evictions;
  }
  Block& blk = blocks_[static_cast<size_t>(b)];
  MOE_CHECK(blk.refs == 0);
  blk.refs = 1;
  return b;
}

int64_t KvBlockManager::begin(SeqId id, std::span<const int32_t> tokens, int64_t max_cached, const KvBlockHash& root,
                              bool lookup) {
  MOE_CHECK(seqs_.count(id) == 0);
  Seq& s = seqs_[id];
  s.root = root;
  if (!caching_ || !lookup) return 0;
  const int64_t limit = std::min<int64_t>(max_cached, static_cast<int64_t>(tokens.size()));
  KvBlockHash parent = root;
  int64_t hit = 0;
  while (hit + block_size_ <= limit) {
    const auto ids = tokens.subspan(static_cast<size_t>(hit), static_cast<size_t>(block_size_));
    const KvBlockHash key = hash(parent, ids);
    auto it = cached_.find(key);
    if (it != cached_.end()) {
      const Block& blk = blocks_[static_cast<size_t>(it->second)];
      if (!std::equal(ids.begin(), ids.end(), blk.tokens.begin(), blk.tokens.end())) {
        ++counters_.collisions;
        break;
      }
      ref(it->second);
      s.table.push_back(it->second);
    } else {
      if (!load_missing || free_blocks() == 0) break;
      const int32_t b = take();
      if (!load_missing(key, ids, b)) {
        blocks_[static_cast<size_t>(b)].refs = 0;
        free_.push_back(b);
        break;
      }
      Block& blk = blocks_[static_cast<size_t>(b)];
      blk.cached = true;
      blk.key = key;
      blk.tokens.assign(ids.begin(), ids.end());
      cached_.emplace(key, b);
      s.table.push_back(b);
    }
    s.keys.push_back(key);
    parent = key;
    hit += block_size_;
  }
  s.committed_blocks = s.keys.size();
  return hit;
}

int64_t KvBlockManager::blocks_needed(SeqId id, int64_t tokens) const {
  return std::max<int64_t>(0, blocks_for(tokens, block_size_) - static_cast<int64_t>(seq(id).table.size()));
}

bool KvBlockManager::ensure(SeqId id, int64_t tokens) {
  Seq& s = seq(id);
  const int64_t need = blocks_needed(id, tokens);
  if (need > free_blocks()) return false;
  for (int64_t i = 0; i < need; ++i) s.table.push_back(take());
  return true;
}

void KvBlockManager::commit(SeqId id, std::span<const int32_t> tokens, int64_t computed) {
  if (!caching_) return;
  Seq& s = seq(id);
  const size_t full = static_cast<size_t>(std::min<int64_t>(computed, static_cast<int64_t>(tokens.size())) / block_size_);
  MOE_CHECK(full <= s.table.size());
  while (s.committed_blocks < full) {
    const size_t i = s.committed_blocks;
    const auto ids = tokens.subspan(i * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_));
    if (s.keys.size() == i) s.keys.push_back(hash(i == 0 ? s.root : s.keys[i - 1], ids));
    const KvBlockHash& key = s.keys[i];
    const int32_t b = s.table[i];
    Block& blk = blocks_[static_cast<size_t>(b)];
    if (!blk.cached && cached_.count(key) == 0) {
      blk.cached = true;
      blk.key = key;
      blk.tokens.assign(ids.begin(), ids.end());
      cached_.emplace(key, b);
      if (on_cached) on_cached(key, b, ids);
    }
    ++s.committed_blocks;
  }
}

void KvBlockManager::free(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  const std::vector<int32_t>& table = it->second.table;
  for (auto b = table.rbegin(); b != table.rend(); ++b) {  // tail first: evicted first
    Block& blk = blocks_[static_cast<size_t>(*b)];
    MOE_CHECK(blk.refs > 0);
    if (--blk.refs > 0) continue;
    if (blk.cached) {
      lru_.push_back(*b);
      blk.in_lru = std::prev(lru_.end());
    } else {
      free_.push_back(*b);
    }
  }
  seqs_.erase(it);
}

void KvBlockManager::reset_prefix_cache() {
  for (int32_t b : lru_) {
    Block& blk = blocks_[static_cast<size_t>(b)];
    blk.cached = false;
    blk.tokens.clear();
    free_.push_back(b);
  }
  lru_.clear();
  for (auto& [key, b] : cached_) {
    Block& blk = blocks_[static_cast<size_t>(b)];
    blk.cached = false;
    blk.tokens.clear();
  }
  cached_.clear();
}

}  // namespace moe
