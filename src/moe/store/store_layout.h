// Paths inside a checkpoint store directory (LevelDB's naming):
//   STORE/CURRENT                 one line: the live manifest's file name, e.g. "MANIFEST-000003"
//   STORE/MANIFEST-000003         a version's manifest (JSON, manifest.h)
//   STORE/LOCK                    flock'ed by a save or gc (store_lock.h)
//   STORE/shards/ab/<32 hex>.shard  one shard, named by the XXH3-128 of its raw bytes
//   STORE/tmp/                    temporary files of a save in progress
#pragma once

#include <cstdint>
#include <string>

#include "moe/status.h"
#include "moe/store/content_hash.h"

namespace moe {

std::string store_current_path(const std::string& store);
std::string store_lock_path(const std::string& store);
std::string store_tmp_dir(const std::string& store);
// "MANIFEST-%06d".
std::string manifest_file_name(int64_t version);
std::string store_manifest_path(const std::string& store, int64_t version);
// Version number of a manifest file name; InvalidArgument unless "MANIFEST-<digits>".
StatusOr<int64_t> parse_manifest_file_name(const std::string& name);
std::string store_shard_path(const std::string& store, const Hash128& hash);
// Whether `dir` looks like a store: it has a CURRENT file, or manifests (a store whose
// CURRENT was lost, which opening then reports).
bool is_store_dir(const std::string& dir);

}  // namespace moe
