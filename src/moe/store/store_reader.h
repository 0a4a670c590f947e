// Reading a store: its versions and their manifests, and one shard's verified bytes,
// with fallback to another good copy when the stored one is corrupt or missing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "moe/status.h"
#include "moe/store/manifest.h"

namespace moe {

// The version CURRENT names. NotFound if STORE/CURRENT is missing ("not a store");
// DataLoss naming CURRENT if its contents are not a manifest file name.
StatusOr<int64_t> current_version(const std::string& store);

// Versions with a manifest file in the store, ascending.
StatusOr<std::vector<int64_t>> list_versions(const std::string& store);

// Reads and parses MANIFEST-<version>. NotFound naming the file if missing; DataLoss
// (manifest.h) if garbage or truncated.
StatusOr<Manifest> read_manifest(const std::string& store, int64_t version);

// Where a shard's good bytes came from.
enum class ShardSource { kStore, kHfSource };

struct ShardReadResult {
  ShardSource source = ShardSource::kStore;
  std::string path;  // the file read (shard file, or the HF file(s) it was rebuilt from)
};

// Reads shard `entry` of `manifest` into `raw` (exactly entry.raw_bytes), verifying its
// hash. If the stored copy is missing or corrupt, logs a warning naming the shard
// (layer, expert) and the file and what was wrong, then tries the manifest's
// source_dir (the HF checkpoint it was saved from): its tensors are read, hashed, and
// used if the hash matches; the warning then names where the good copy came from.
// Returns the first error (DataLoss / NotFound naming layer, expert and file) if no
// copy is good. Thread-safe.
StatusOr<ShardReadResult> read_shard_verified(const std::string& store, const Manifest& manifest,
                                              const ShardEntry& entry, std::span<uint8_t> raw);

}  // namespace moe
