// KvBlockManager: reference counts, on-demand tables, prefix hits, LRU eviction order,
// collisions, reset. Every expected value is worked out by hand from the rules in
// src/moe/kv/block_manager.h (block size 4 unless said).
#include "moe/kv/block_manager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace moe {
namespace {

std::vector<int32_t> iota_tokens(int n, int first = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

KvBlockManagerOptions opts(int64_t blocks, bool caching = true) {
  return {.num_blocks = blocks, .block_size = 4, .enable_prefix_caching = caching, .hash_for_test = nullptr};
}

TEST(KvBlockHash, ChainsTheParentAndTheTokens) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  const KvBlockHash root = kv_root_hash("model"), other = kv_root_hash("model2");
  EXPECT_EQ(kv_block_hash(root, a), kv_block_hash(root, a));
  EXPECT_NE(kv_block_hash(root, a), kv_block_hash(root, b));
  EXPECT_NE(kv_block_hash(root, a), kv_block_hash(other, a));
  // The digest is XXH3-128 of parent (high, low as host u64) then the ids: same as hashing those bytes.
  std::vector<uint8_t> bytes(16 + 16);
  const uint64_t p[2] = {root.high, root.low};
  std::memcpy(bytes.data(), p, 16);
  std::memcpy(bytes.data() + 16, a.data(), 16);
  EXPECT_EQ(kv_block_hash(root, a), hash_bytes(bytes.data(), bytes.size()));
}

TEST(KvBlockManager, GrowsOnDemandAndRefusesWhenShort) {
  KvBlockManager m(opts(3));
  m.begin(1, {}, 0, {}, false);
  EXPECT_EQ(m.blocks_needed(1, 5), 2);
  ASSERT_TRUE(m.ensure(1, 5));  // 2 blocks: ids 0, 1 (low ids first)
  EXPECT_EQ(m.table(1), (std::vector<int32_t>{0, 1}));
  ASSERT_TRUE(m.ensure(1, 8));  // still 2 blocks
  EXPECT_EQ(m.free_blocks(), 1);
  m.begin(2, {}, 0, {}, false);
  EXPECT_FALSE(m.ensure(2, 9));  // 3 blocks > 1 free: nothing taken
  EXPECT_EQ(m.free_blocks(), 1);
  EXPECT_TRUE(m.table(2).empty());
  ASSERT_TRUE(m.ensure(2, 1));
  EXPECT_EQ(m.table(2), (std::vector<int32_t>{2}));
  EXPECT_EQ(m.used_blocks(), 3);
  m.free(1);
  EXPECT_EQ(m.free_blocks(), 2);
  m.free(1);  // unknown now: no-op
  EXPECT_EQ(m.free_blocks(), 2);
}

TEST(KvBlockManager, SharesACachedPrefixAndKeepsOneTokenToCompute) {
  KvBlockManager m(opts(8));
  const KvBlockHash root = kv_root_hash("r");
  const auto t = iota_tokens(10);  // blocks: [100..103] [104..107] [108 109]
  EXPECT_EQ(m.begin(1, t, 9, root, true), 0);
  ASSERT_TRUE(m.ensure(1, 10));  // 3 blocks: 0 1 2
  m.commit(1, t, 10);             // two full blocks cached
  // A second sequence with the same 10 tokens: 8 cached, at most 9 allowed.
  EXPECT_EQ(m.begin(2, t, 9, root, true), 8);
  EXPECT_EQ(m.table(2), (std::vector<int32_t>{0, 1}));
  ASSERT_TRUE(m.ensure(2, 10));
  EXPECT_EQ(m.table(2), (std::vector<int32_t>{0, 1, 3}));
  // With exactly 8 tokens and max_cached 7: only the first block can be used.
  const std::vector<int32_t> eight(t.begin(), t.begin() + 8);
  EXPECT_EQ(m.begin(3, eight, 7, root, true), 4);
  // Another root (another salt) shares nothing.
  EXPECT_EQ(m.begin(4, t, 9, kv_root_hash("salt"), true), 0);
  // Lookup off (e.g. prompt logprobs) shares nothing either.
  EXPECT_EQ(m.begin(5, t, 9, root, false), 0);
  // Lookups are counted by the caller, once per prompt.
  EXPECT_EQ(m.counters().queried_tokens, 0);
  m.record_lookup(10, 8);
  m.record_lookup(8, 4);
  EXPECT_EQ(m.counters().queried_tokens, 18);
  EXPECT_EQ(m.counters().hit_tokens, 12);
  // Block 0 is referenced by 1, 2, 3: freeing two keeps it in use.
  m.free(1);
  m.free(3);
  EXPECT_EQ(m.used_blocks(), 3);  // 0, 1, 3 (sequence 2)
}

TEST(KvBlockManager, CachingOffSharesNothing) {
  KvBlockManager m(opts(8, false));
  const auto t = iota_tokens(8);
  m.begin(1, t, 7, {}, true);
  ASSERT_TRUE(m.ensure(1, 8));
  m.commit(1, t, 8);
  EXPECT_EQ(m.begin(2, t, 7, {}, true), 0);
  m.free(1);
  EXPECT_EQ(m.cached_free_blocks(), 0);
}

TEST(KvBlockManager, EvictsLeastRecentlyUsedTailFirstAfterPlainFreeBlocks) {
  KvBlockManager m(opts(4));
  const KvBlockHash root = kv_root_hash("r");
  const auto a = iota_tokens(8, 0);   // blocks 0, 1
  const auto b = iota_tokens(8, 50);  // blocks 2, 3
  m.begin(1, a, 7, root, true);
  ASSERT_TRUE(m.ensure(1, 8));
  m.commit(1, a, 8);
  m.begin(2, b, 7, root, true);
  ASSERT_TRUE(m.ensure(2, 8));
  m.commit(2, b, 8);
  m.free(1);  // LRU: 1 0 (tail first)
  m.free(2);  // LRU: 1 0 3 2
  EXPECT_EQ(m.cached_free_blocks(), 4);
  EXPECT_EQ(m.free_blocks(), 4);
  // A new sequence of 1 block evicts block 1 (a's tail): a's head still hits.
  m.begin(3, {}, 0, {}, false);
  ASSERT_TRUE(m.ensure(3, 1));
  EXPECT_EQ(m.table(3), (std::vector<int32_t>{1}));
  EXPECT_EQ(m.counters().evictions, 1);
  EXPECT_EQ(m.begin(4, a, 7, root, true), 4);
  EXPECT_EQ(m.table(4), (std::vector<int32_t>{0}));
  // Sequence 3 frees its uncached block to the plain list: it is reused before any
  // cached one.
  m.free(3);
  m.begin(5, {}, 0, {}, false);
  ASSERT_TRUE(m.ensure(5, 1));
  EXPECT_EQ(m.table(5), (std::vector<int32_t>{1}));
  EXPECT_EQ(m.counters().evictions, 1);
  // b still fully cached.
  EXPECT_EQ(m.begin(6, b, 8, root, true), 8);
  EXPECT_EQ(m.table(6), (std::vector<int32_t>{2, 3}));
}

TEST(KvBlockManager, ACollisionIsNeverServed) {
  KvBlockManagerOptions o = opts(8);
  // Every block hashes alike: only the token check tells them apart.
  o.hash_for_test = [](const KvBlockHash&, std::span<const int32_t>) { return KvBlockHash{1, 2}; };
  KvBlockManager m(o);
  const auto a = iota_tokens(5, 0), b = iota_tokens(5, 10);
  m.begin(1, a, 4, {}, true);
  ASSERT_TRUE(m.ensure(1, 5));
  m.commit(1, a, 5);
  EXPECT_EQ(m.begin(2, b, 4, {}, true), 0);
  EXPECT_EQ(m.counters().collisions, 1);
  EXPECT_EQ(m.begin(3, a, 4, {}, true), 4);  // the real prefix still hits
  // b's own block cannot be cached under the taken key: it stays private.
  ASSERT_TRUE(m.ensure(2, 5));
  m.commit(2, b, 5);
  m.free(2);
  EXPECT_EQ(m.cached_free_blocks(), 0);
}

TEST(KvBlockManager, ResetForgetsCachedBlocksButNotTables) {
  KvBlockManager m(opts(4));
  const auto a = iota_tokens(8, 0);
  m.begin(1, a, 7, {}, true);
  ASSERT_TRUE(m.ensure(1, 8));
  m.commit(1, a, 8);
  m.begin(2, a, 7, {}, true);  // shares block 0
  m.free(1);                   // block 1 cached-free; block 0 still used by 2
  EXPECT_EQ(m.cached_free_blocks(), 1);
  m.reset_prefix_cache();
  EXPECT_EQ(m.cached_free_blocks(), 0);
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_EQ(m.table(2), (std::vector<int32_t>{0}));
  m.free(2);
  EXPECT_EQ(m.free_blocks(), 4);
  EXPECT_EQ(m.begin(3, a, 7, {}, true), 0);
}

TEST(KvBlockManager, ASecondTierSuppliesMissingBlocks) {
  KvBlockManager m(opts(4));
  const auto a = iota_tokens(9, 0);
  std::vector<int32_t> loaded;
  m.load_missing = [&](const KvBlockHash&, std::span<const int32_t> ids, int32_t block) {
    if (ids[0] != 0) return false;  // only the first block is "on disk"
    loaded.push_back(block);
    return true;
  };
  EXPECT_EQ(m.begin(1, a, 8, {}, true), 4);
  EXPECT_EQ(loaded, (std::vector<int32_t>{0}));
  EXPECT_EQ(m.table(1), (std::vector<int32_t>{0}));
  EXPECT_EQ(m.free_blocks(), 3);  // the refused block went back
  // The loaded block is cached in memory now.
  m.load_missing = nullptr;
  EXPECT_EQ(m.begin(2, a, 8, {}, true), 4);
  std::vector<KvBlockHash> cached;
  m.on_cached = [&](const KvBlockHash& k, int32_t, std::span<const int32_t>) { cached.push_back(k); };
  ASSERT_TRUE(m.ensure(1, 9));
  m.commit(1, a, 9);  // block 1 (ids 4..7) newly cached; block 0 was already
  ASSERT_EQ(cached.size(), 1u);
  EXPECT_EQ(cached[0], kv_block_hash(kv_block_hash({}, std::span(a).subspan(0, 4)), std::span(a).subspan(4, 4)));
}

}  // namespace
}  // namespace moe
