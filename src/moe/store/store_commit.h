// Small pieces of the store's commit protocol shared by save (store_writer.cc) and gc /
// verify / export (store_maintenance.cc): durable whole-file writes through a StoreEnv,
// the CURRENT pointer, reading a version's manifest, and tmp/ cleanup.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moe/status.h"
#include "moe/store/manifest.h"
#include "moe/store/store_env.h"

namespace moe {

// A name unique in this process and among live processes: "<tag>.<pid>.<n>.tmp".
std::string unique_tmp_name(const std::string& tag);

// Writes `bytes` to STORE/tmp/<unique>, fsyncs and closes it, then renames it to
// `final_path` (atomic replace). The temp file is removed on any error. Errors are the
// env's (Internal naming the path and the OS reason).
Status write_file_durably(StoreEnv& env, const std::string& store, const std::string& final_path,
                          std::string_view bytes);

// The version STORE/CURRENT names, or 0 if the store has no CURRENT (no version yet).
// DataLoss naming CURRENT if it does not hold a manifest file name.
StatusOr<int64_t> read_current_or_zero(const std::string& store);

// The error for a store without CURRENT: NotFound ("not a checkpoint store") if it has no
// manifests either; DataLoss naming CURRENT and how to restore it if it has some.
Status no_current_error(const std::string& store);

// Reads and parses STORE/MANIFEST-<version>: NotFound naming the file if missing,
// DataLoss (parse_manifest) if it is not a valid manifest.
StatusOr<Manifest> load_manifest(const std::string& store, int64_t version);

// Resolves `version` (0: current) and reads its manifest. NotFound naming the store if
// it has no CURRENT (not a store) when version is 0.
StatusOr<Manifest> load_version(const std::string& store, int64_t version);

// Versions with a MANIFEST-<n> file in the store, ascending.
StatusOr<std::vector<int64_t>> manifest_versions(StoreEnv& env, const std::string& store);

// Removes every entry of STORE/tmp/ (leftovers of an interrupted save). Returns the
// bytes removed. Call only under STORE/LOCK.
StatusOr<uint64_t> clear_store_tmp(StoreEnv& env, const std::string& store);

}  // namespace moe
