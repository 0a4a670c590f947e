// The disk tier of cached KV blocks: full blocks the prefix cache evicts from the paged
// pool are written to files named by their chained block hash, so a later request (or a
// restarted server) with the same prefix reads them back instead of recomputing them.
//
// One directory, one file per block: DIR/<hash hex>.kvb (32 lowercase hex digits,
// Hash128::hex()). Content-addressed: a block already on disk is never rewritten. The
// files' total size is bounded by max_bytes: past it the least recently used files are
// deleted (recency: the order of puts and hits in this process; after a restart, the
// files' modification times). Writes go through the injectable StoreEnv (temp file
// DIR/<hash hex>.kvb.tmp, append, fsync, rename, fsync of the directory: readers see a
// whole file or none; the fsyncs are optional, KvDiskTierOptions::sync, since every read
// is verified); reads and stat(2) are plain POSIX.
//
// File format (version 1), every integer little-endian:
//   offset  size  field
//        0     8  magic "MOEKVB1\0"
//        8     4  uint32 version (1)
//       12     4  uint32 header bytes (96)
//       16     8  uint64 model fingerprint
//       24    24  int32 num_layers, num_kv_heads, head_dim, v_head_dim, block_size, dtype
//       48    16  uint64 hash low, hash high (the file's name)
//       64     8  uint64 token count (= block_size)
//       72     8  uint64 payload bytes (= KvBlockLayout::block_bytes())
//       80     8  uint64 payload checksum: XXH3-64 of the token ids then the payload
//       88     8  uint64 header checksum: XXH3-64 of bytes [0, 88)
//       96        int32 token ids [token count]
//                 payload [payload bytes]: the block's bytes as the caller gave them
//
// A directory belongs to one tier (one process): open() deletes stale temp files.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "moe/status.h"
#include "moe/store/content_hash.h"
#include "moe/store/store_env.h"

namespace moe {

// The key of a full block (XXH3-128, computed by the block manager). == and hex() come
// from Hash128.
using KvBlockHash = Hash128;

// What the bytes of one block are. A file written with another layout (or fingerprint)
// is rejected by get().
struct KvBlockLayout {
  uint64_t model_fingerprint = 0;  // model/fingerprint.h
  int32_t num_layers = 0;          // > 0
  int32_t num_kv_heads = 0;        // > 0 (1 for MLA's latent cache)
  int32_t head_dim = 0;            // > 0: K row width per head
  int32_t v_head_dim = 0;          // >= 0: V row width per head (0: no V, MLA)
  int32_t block_size = 0;          // tokens per block, > 0
  int32_t dtype = 0;               // the KV dtype: static_cast<int32_t>(DType) (tensor/dtype.h)
  // num_layers * num_kv_heads * block_size * (head_dim + v_head_dim) * dtype bytes: one
  // block over all layers, K and V. Precondition: a valid layout (open() checks).
  uint64_t block_bytes() const;
  // Size of one block's file: header + token ids + payload.
  uint64_t file_bytes() const;
  bool operator==(const KvBlockLayout&) const = default;
};

struct KvDiskTierOptions {
  std::string dir;                   // created if missing
  uint64_t max_bytes = 0;            // bound on the block files' total size
  StoreEnv* env = nullptr;           // nullptr: default_store_env(); must outlive the tier
  int64_t max_queued_blocks = 64;    // puts waiting for the writer; more are dropped (> 0)
  // fsync each file and the directory before and after its rename. false: a crash may
  // leave a torn or empty file under a block's name, which get() rejects (and deletes)
  // like any corrupt file; writes no longer wait for the disk.
  bool sync = true;
};

// Running totals since open(), plus the current size. Bytes are whole files for writes,
// payload bytes for hits.
struct KvDiskTierCounters {
  int64_t writes = 0;          // block files written
  int64_t write_bytes = 0;     // their bytes
  int64_t write_failures = 0;  // writes that failed (e.g. a full disk); nothing left behind
  int64_t dropped = 0;         // puts dropped because the queue was full
  int64_t hits = 0;            // get() that filled `out`
  int64_t hit_bytes = 0;
  int64_t misses = 0;          // get() of a hash with no indexed file
  int64_t rejects = 0;         // get() of an indexed file that failed verification
  int64_t evictions = 0;       // files deleted to stay under max_bytes
  int64_t resident_blocks = 0;  // indexed files now
  int64_t resident_bytes = 0;   // their bytes
};

// Thread-safety: every method may be called from any thread (one mutex guards the index
// and the counters; no file I/O is done under it). The intended use is one caller (the
// scheduler's thread) beside the tier's own writer thread.
class KvDiskTier {
 public:
  // Opens (creating) `options.dir` and indexes the block files in it, so a restart finds
  // them (sizes and modification times only: contents are verified by get()). Files that
  // are not block files are left alone; stale temp files are deleted; if the files
  // exceed max_bytes, the oldest are evicted. Starts the writer thread.
  // Errors: InvalidArgument for a bad layout or options; FailedPrecondition naming the
  // directory if it cannot be created, listed or written (the caller logs a warning and
  // runs without the tier).
  static StatusOr<std::unique_ptr<KvDiskTier>> open(const KvDiskTierOptions& options, const KvBlockLayout& layout);
  // Writes what is queued (failures are counted), then stops the writer.
  ~KvDiskTier();
  KvDiskTier(const KvDiskTier&) = delete;
  KvDiskTier& operator=(const KvDiskTier&) = delete;

  // Queues block `hash` for writing and returns at once: copies `tokens` (block_size ids)
  // and `bytes` (block_bytes(); MOE_CHECK on both sizes). A block already indexed or
  // queued is not written again (an indexed one counts as used, for the LRU order). A
  // full queue drops the block (counted in `dropped`). The writer thread writes the file,
  // then evicts least recently used files while the total exceeds max_bytes. A failed
  // write is counted and logged (the first of a run of failures), and leaves no file.
  void put(const KvBlockHash& hash, std::span<const int32_t> tokens, std::span<const uint8_t> bytes);

  // Whether a block file for `hash` is indexed (written, not evicted or rejected). No I/O;
  // does not count as a use. A block still queued is not contained.
  bool contains(const KvBlockHash& hash) const;

  // Reads block `hash` into `out` (block_bytes() bytes; MOE_CHECK on sizes) and verifies
  // the magic, the version, the header checksum, the layout and fingerprint (equal to
  // this tier's), the name, the sizes, the payload checksum and that the stored token ids
  // equal `tokens`. True: `out` holds the block (a hit; the file becomes the most
  // recently used). False: a miss (not indexed, or its file vanished) or a reject (any
  // check failed: counted, logged once (the file leaves the index), and the file deleted
  // unless it is a valid file of another layout or version). After false, `out` holds
  // unspecified bytes that must not be used.
  bool get(const KvBlockHash& hash, std::span<const int32_t> tokens, std::span<uint8_t> out);

  // Blocks until every put() before it has been written or has failed.
  void flush();

  KvDiskTierCounters counters() const;
  const KvBlockLayout& layout() const;
  const std::string& dir() const;

 private:
  struct State;
  explicit KvDiskTier(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace moe
