// verify_store, gc_store and export_hf (store_maintenance.h).
#include "moe/store/store_maintenance.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <system_error>

#include "moe/store/manifest.h"
#include "moe/store/shard_file.h"
#include "moe/store/store_commit.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_lock.h"
#include "moe/store/store_parallel.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string problem_of(const Status& st) {
  if (st.code() == StatusCode::kNotFound) return "missing";
  return st.message();
}

// Shard files are "<32 hex>.shard"; nullopt-like false for anything else.
bool parse_shard_file_name(const std::string& name, Hash128* hash) {
  const std::string suffix = ".shard";
  if (name.size() != 32 + suffix.size() || name.compare(32, suffix.size(), suffix) != 0) return false;
  auto parsed = Hash128::parse(name.substr(0, 32));
  if (!parsed.ok()) return false;
  *hash = *parsed;
  return true;
}

// A manifest file name must stay inside the output directory.
Status check_relative_name(const std::string& name, const std::string& origin) {
  const fs::path p(name);
  if (name.empty() || p.is_absolute()) return data_loss(origin + ": file name '" + name + "' is not relative");
  for (const auto& part : p) {
    if (part == "..") return data_loss(origin + ": file name '" + name + "' leaves the directory");
  }
  return ok_status();
}

Status read_entry(const std::string& store, const ShardEntry& entry, std::vector<uint8_t>& raw) {
  raw.assign(entry.raw_bytes, 0);
  Status st = read_shard(store_shard_path(store, entry.hash), entry.hash, raw);
  if (!st.ok()) return st.with_context(entry.describe() + " (shard " + entry.id + ")");
  return ok_status();
}

}  // namespace

StatusOr<VerifyReport> verify_store(const std::string& store, int64_t version, int threads,
                                    const StoreProgressFn& progress) {
  MOE_ASSIGN_OR_RETURN(Manifest manifest, load_version(store, version));
  VerifyReport report;
  report.version = manifest.version;
  report.shards_checked = static_cast<int>(manifest.shards.size());
  report.raw_bytes = manifest.total_raw_bytes();
  // Each stored file once; a bad file is reported for every shard that uses it.
  std::map<Hash128, const ShardEntry*> unique;
  for (const auto& entry : manifest.shards) unique.emplace(entry.hash, &entry);
  std::vector<const ShardEntry*> files;
  for (const auto& [hash, entry] : unique) files.push_back(entry);
  uint64_t total = 0;
  for (const auto* entry : files) total += entry->raw_bytes;
  std::mutex mu;
  std::map<Hash128, std::string> problems;
  MOE_RETURN_IF_ERROR(run_parallel(files.size(), std::max(threads, 1), "verifying", total, progress,
                                   [&](size_t i, std::atomic<uint64_t>& done) -> Status {
                                     const ShardEntry& entry = *files[i];
                                     std::vector<uint8_t> raw(entry.raw_bytes);
                                     Status st = read_shard(store_shard_path(store, entry.hash), entry.hash, raw);
                                     if (!st.ok()) {
                                       std::lock_guard<std::mutex> lock(mu);
                                       problems[entry.hash] = problem_of(st);
                                     }
                                     done += entry.raw_bytes;
                                     return ok_status();
                                   }));
  for (const auto& entry : manifest.shards) {
    auto it = problems.find(entry.hash);
    if (it == problems.end()) continue;
    report.bad.push_back({entry.id, entry.describe(), store_shard_path(store, entry.hash), it->second});
  }
  return report;
}

StatusOr<GcReport> gc_store(const std::string& store, int keep_versions, StoreEnv* env_in) {
  if (keep_versions < 1) {
    return invalid_argument("gc must keep at least 1 version (the current one), got " + std::to_string(keep_versions));
  }
  StoreEnv& env = env_in != nullptr ? *env_in : default_store_env();
  MOE_ASSIGN_OR_RETURN(const int64_t current, read_current_or_zero(store));
  if (current == 0) return no_current_error(store);
  MOE_ASSIGN_OR_RETURN(StoreLock lock, StoreLock::acquire(store));
  // CURRENT may have moved before we took the lock.
  MOE_ASSIGN_OR_RETURN(const int64_t live, read_current_or_zero(store));
  MOE_ASSIGN_OR_RETURN(std::vector<int64_t> versions, manifest_versions(env, store));

  // Kept: the current version and the newest keep_versions - 1 committed ones before it.
  // Manifests newer than CURRENT were never committed (a failed save): removed.
  std::set<int64_t> kept = {live};
  for (auto it = versions.rbegin(); it != versions.rend() && static_cast<int>(kept.size()) < keep_versions; ++it) {
    if (*it < live) kept.insert(*it);
  }
  // Every kept manifest must be readable before anything is removed.
  std::set<Hash128> referenced;
  for (int64_t v : kept) {
    MOE_ASSIGN_OR_RETURN(Manifest manifest, load_manifest(store, v));
    for (const auto& entry : manifest.shards) referenced.insert(entry.hash);
  }
  GcReport report;
  for (int64_t v : versions) {
    if (kept.count(v)) continue;
    MOE_RETURN_IF_ERROR(env.remove_file(store_manifest_path(store, v)));
    report.versions_removed.push_back(v);
  }
  if (!report.versions_removed.empty()) MOE_RETURN_IF_ERROR(env.sync_dir(store));

  const std::string shards_dir = fs::path(store_shard_path(store, Hash128{})).parent_path().parent_path().string();
  if (env.file_exists(shards_dir)) {
    MOE_ASSIGN_OR_RETURN(auto subdirs, env.list_dir(shards_dir));
    for (const auto& sub : subdirs) {
      const std::string dir = shards_dir + "/" + sub;
      std::error_code ec;
      if (!fs::is_directory(dir, ec)) continue;
      MOE_ASSIGN_OR_RETURN(auto names, env.list_dir(dir));
      bool removed_any = false;
      for (const auto& name : names) {
        Hash128 hash;
        if (!parse_shard_file_name(name, &hash) || referenced.count(hash)) continue;
        const std::string path = dir + "/" + name;
        const auto size = fs::file_size(path, ec);
        MOE_RETURN_IF_ERROR(env.remove_file(path));
        report.shards_removed += 1;
        if (!ec) report.bytes_removed += size;
        removed_any = true;
      }
      if (removed_any) MOE_RETURN_IF_ERROR(env.sync_dir(dir));
    }
  }
  MOE_ASSIGN_OR_RETURN(const uint64_t tmp_bytes, clear_store_tmp(env, store));
  report.bytes_removed += tmp_bytes;
  return report;
}

namespace {

// Writes the files of `manifest` into `out_dir` (exists, empty).
Status export_into(const std::string& store, const Manifest& manifest, const std::string& out_dir,
                   const StoreProgressFn& progress);

}  // namespace

Status export_hf(const std::string& store, int64_t version, const std::string& out_dir,
                 const StoreProgressFn& progress) {
  if (version < 0) return invalid_argument("version " + std::to_string(version) + " is not a version (0: current)");
  MOE_ASSIGN_OR_RETURN(Manifest manifest, load_version(store, version));
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    if (!fs::is_directory(out_dir, ec)) return failed_precondition("export target " + out_dir + " is not a directory");
    if (!fs::is_empty(out_dir, ec)) {
      return failed_precondition("export target " + out_dir + " is not empty; give a new or empty directory");
    }
  }
  // Written beside the target and renamed into place at the end, so a failed export
  // leaves no half-written directory behind.
  fs::path target = fs::path(out_dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" -> "out"
  const std::string work = target.string() + ".partial-" + std::to_string(::getpid());
  fs::remove_all(work, ec);
  Status st = default_store_env().create_dirs(work);
  if (st.ok()) st = export_into(store, manifest, work, progress);
  if (st.ok() && fs::exists(out_dir, ec)) {
    fs::remove(out_dir, ec);  // empty (checked above)
    if (ec) st = internal_error("cannot replace the empty directory " + out_dir + ": " + ec.message());
  }
  if (st.ok()) {
    fs::rename(work, out_dir, ec);
    if (ec) st = internal_error("cannot rename " + work + " to " + out_dir + ": " + ec.message());
  }
  if (!st.ok()) fs::remove_all(work, ec);
  return st;
}

namespace {

Status export_into(const std::string& store, const Manifest& manifest, const std::string& out_dir,
                   const StoreProgressFn& progress) {
  const std::string origin = store_manifest_path(store, manifest.version);
  StoreEnv& env = default_store_env();
  std::set<std::string> header_ids;
  for (const auto& f : manifest.hf_files) header_ids.insert(f.header_shard);
  const uint64_t total = manifest.total_raw_bytes() - [&] {
    uint64_t h = 0;
    for (const auto& id : header_ids) h += manifest.find_shard(id) ? manifest.find_shard(id)->raw_bytes : 0;
    return h;
  }();
  uint64_t done = 0;
  auto report = [&](uint64_t bytes) {
    done += bytes;
    if (progress) progress("exporting", done, total);
  };
  auto open_out = [&](const std::string& name) -> StatusOr<std::unique_ptr<WritableFile>> {
    MOE_RETURN_IF_ERROR(check_relative_name(name, origin));
    const fs::path path = fs::path(out_dir) / name;
    MOE_RETURN_IF_ERROR(env.create_dirs(path.parent_path().string()));
    return env.new_writable_file(path.string());
  };

  std::vector<uint8_t> raw;
  for (const auto& entry : manifest.shards) {
    if (entry.kind != ShardKind::kFile || header_ids.count(entry.id)) continue;
    MOE_RETURN_IF_ERROR(read_entry(store, entry, raw));
    MOE_ASSIGN_OR_RETURN(auto out, open_out(entry.file_name));
    MOE_RETURN_IF_ERROR(out->append(raw.data(), raw.size()));
    MOE_RETURN_IF_ERROR(out->close());
    report(raw.size());
  }
  for (const auto& file : manifest.hf_files) {
    const ShardEntry* header = manifest.find_shard(file.header_shard);
    if (header == nullptr) return data_loss(origin + ": header shard '" + file.header_shard + "' is not listed");
    MOE_RETURN_IF_ERROR(read_entry(store, *header, raw));
    MOE_ASSIGN_OR_RETURN(auto out, open_out(file.name));
    MOE_RETURN_IF_ERROR(out->append(raw.data(), raw.size()));
    // Each shard is read once and kept while this file still needs some of its tensors.
    std::map<std::string, int> uses;
    for (const auto& name : file.tensors) {
      auto [shard, tensor] = manifest.find_tensor(name);
      if (shard == nullptr) return data_loss(origin + ": " + file.name + " lists tensor '" + name + "' no shard holds");
      uses[shard->id] += 1;
    }
    std::map<std::string, std::vector<uint8_t>> cache;
    for (const auto& name : file.tensors) {
      auto [shard, tensor] = manifest.find_tensor(name);
      auto it = cache.find(shard->id);
      if (it == cache.end()) {
        it = cache.emplace(shard->id, std::vector<uint8_t>()).first;
        MOE_RETURN_IF_ERROR(read_entry(store, *shard, it->second));
      }
      MOE_RETURN_IF_ERROR(out->append(it->second.data() + tensor->offset, tensor->nbytes));
      report(tensor->nbytes);
      if (--uses[shard->id] == 0) cache.erase(it);
    }
    MOE_RETURN_IF_ERROR(out->close());
  }
  return ok_status();
}

}  // namespace

}  // namespace moe
