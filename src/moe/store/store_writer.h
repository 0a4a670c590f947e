// Saving a Hugging Face directory into a store as a new version.
//
// Commit protocol (LevelDB-style): take STORE/LOCK; for each shard whose hash is not
// already stored, encode it, write it to STORE/tmp/, fsync, rename into shards/; write
// the manifest to a temp name, fsync, rename to MANIFEST-<n>; write CURRENT atomically
// (temp + fsync + rename, core/atomic_file.h's recipe through the StoreEnv); fsync the
// directory. A save that fails or is killed at any point leaves the previous version
// current and fully readable; leftovers in tmp/ are removed by the next save or gc.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moe/status.h"
#include "moe/store/codec.h"
#include "moe/store/store_env.h"

namespace moe {

// Progress of a long operation: `done` of `total` units (bytes), with a label.
using StoreProgressFn = std::function<void(const std::string& what, uint64_t done, uint64_t total)>;

struct SaveOptions {
  // "auto" (per shard, the smaller of zstd and zstd-planes; raw if neither helps),
  // or one codec forced for every shard.
  std::string codec = "auto";
  CodecOptions codec_options;  // zstd level and threads
  int threads = 1;             // shards encoded in parallel
  // Convert: the store must not exist or be empty. Save: it must already hold a
  // version of the same model (fingerprint), unless this is the first save.
  bool require_new_store = false;
  StoreEnv* env = nullptr;  // nullptr: default_store_env()
  StoreProgressFn progress;  // optional, called from the calling thread
};

// Bytes and time of one codec over the shards it was tried on (for `moe ckpt info`
// and the compression study).
struct CodecReport {
  Codec codec = Codec::kRaw;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  double seconds = 0;
  int shards = 0;  // shards it was chosen for (auto) or tried on
};

struct SaveReport {
  int64_t version = 0;
  int shards_written = 0;
  int shards_skipped = 0;          // hash already stored
  uint64_t raw_bytes_written = 0;  // of the shards written
  uint64_t stored_bytes_written = 0;
  uint64_t raw_bytes_skipped = 0;
  double seconds = 0;
  std::vector<CodecReport> codecs;  // per codec tried
  // The model is the current version, shard for shard (all stored and intact): no new
  // version was made; `version` is the current one.
  bool unchanged = false;
};

// Saves the HF directory `model_dir` into `store` as a new version and makes it
// current. Errors (nothing committed is lost on any of them):
//   NotFound / DataLoss / InvalidArgument: the model directory (named) is missing or
//     malformed (config.json, safetensors, a safetensors file with holes);
//   FailedPrecondition: the store is inside the model directory or the other way round;
//     another save holds the lock (store_lock.h); the store holds
//     another model (fingerprint mismatch, both named); require_new_store and the store
//     has a version;
//   Internal: a write failed (the path and OS reason, e.g. "No space left on device").
StatusOr<SaveReport> save_to_store(const std::string& model_dir, const std::string& store, const SaveOptions& options);

}  // namespace moe
