// Store upkeep: verify every shard, garbage-collect old versions, describe versions,
// and export a version back to a Hugging Face directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/status.h"
#include "moe/store/store_writer.h"

namespace moe {

struct BadShard {
  std::string id;
  std::string description;  // ShardEntry::describe(): layer, expert or file
  std::string path;         // the shard file
  std::string problem;      // "missing", "hash mismatch (expected X, got Y)", "truncated"...
};

struct VerifyReport {
  int64_t version = 0;
  int shards_checked = 0;
  uint64_t raw_bytes = 0;
  std::vector<BadShard> bad;
};

// Reads and hashes every shard of `version` (0: current) on `threads` threads. Bad
// shards are listed, not returned as an error; errors are for an unreadable store or
// manifest.
StatusOr<VerifyReport> verify_store(const std::string& store, int64_t version, int threads,
                                    const StoreProgressFn& progress);

struct GcReport {
  std::vector<int64_t> versions_removed;
  int shards_removed = 0;
  uint64_t bytes_removed = 0;
};

// Keeps the newest `keep_versions` (>= 1; the current one is always kept), removes
// older manifests, then every shard file no kept manifest references, and tmp/
// leftovers. Takes STORE/LOCK (FailedPrecondition if a save holds it).
// InvalidArgument for keep_versions < 1.
StatusOr<GcReport> gc_store(const std::string& store, int keep_versions, StoreEnv* env = nullptr);

// Writes `version` (0: current) as a Hugging Face directory `out_dir` (created; must
// not exist or be empty): every file of the source directory, byte for byte, the
// safetensors files rebuilt from their headers and tensors. Verifies every hash.
// FailedPrecondition if out_dir has files; DataLoss naming the shard as reading does.
Status export_hf(const std::string& store, int64_t version, const std::string& out_dir,
                 const StoreProgressFn& progress);

}  // namespace moe
