// save_to_store: plan the shards of a Hugging Face directory (store_save_plan.h), hash
// them, encode and write the ones not yet stored, then commit a manifest and CURRENT.
#include "moe/store/store_writer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <system_error>

#include "moe/core/mapped_file.h"
#include "moe/store/content_hash.h"
#include "moe/store/manifest.h"
#include "moe/store/shard_file.h"
#include "moe/store/shard_grouping.h"
#include "moe/store/store_commit.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_lock.h"
#include "moe/store/store_parallel.h"
#include "moe/store/store_save_plan.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A store directory must be absent, empty, or hold only what a store holds: saving into
// some other directory would mix the store's files with the user's.
Status check_store_dir(const std::string& store) {
  std::error_code ec;
  if (!std::filesystem::exists(store, ec)) return ok_status();
  if (!std::filesystem::is_directory(store, ec)) {
    return failed_precondition("store " + store + " exists and is not a directory");
  }
  for (const auto& entry : std::filesystem::directory_iterator(store, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "CURRENT" || name == "LOCK" || name == "tmp" || name == "shards") continue;
    if (parse_manifest_file_name(name).ok()) continue;
    return failed_precondition("store " + store + " is not empty and not a checkpoint store (it holds '" +
                               name + "'); give an empty or new directory");
  }
  return ok_status();
}

// What encoding one shard gave.
struct Encoded {
  Codec codec = Codec::kRaw;
  int element_bytes = 1;
  uint64_t stored_bytes = 0;
  std::vector<CodecTrial> trials;
};

// Encodes shard `shard` (raw bytes hashing to `hash`) and writes it to tmp/, then renames
// it to its content-addressed path.
Status write_one_shard(StoreEnv& env, const std::string& store, const PlannedShard& shard,
                       const SaveOptions& options, const Codec* forced, Encoded* out) {
  const ShardEntry& entry = shard.entry;
  std::vector<uint8_t> joined;
  std::span<const uint8_t> raw;
  if (shard.pieces.size() == 1) {
    raw = {shard.pieces[0].data, shard.pieces[0].size};
  } else {
    joined.resize(entry.raw_bytes);
    size_t at = 0;
    for (const auto& piece : shard.pieces) {
      if (piece.size > 0) std::memcpy(joined.data() + at, piece.data, piece.size);
      at += piece.size;
    }
    raw = joined;
  }
  std::vector<uint8_t> payload;
  out->element_bytes = entry.element_bytes;
  if (forced != nullptr) {
    const auto start = Clock::now();
    MOE_ASSIGN_OR_RETURN(payload, encode(*forced, raw, entry.element_bytes, options.codec_options));
    out->codec = *forced;
    out->trials.push_back({*forced, payload.size(), seconds_since(start)});
  } else {
    MOE_ASSIGN_OR_RETURN(payload,
                         encode_best(raw, entry.element_bytes, options.codec_options, &out->codec, &out->trials));
  }
  out->stored_bytes = payload.size();
  std::vector<uint8_t>().swap(joined);

  ShardHeader header;
  header.codec = out->codec;
  header.element_bytes = entry.element_bytes;
  header.raw_bytes = entry.raw_bytes;
  header.stored_bytes = payload.size();
  header.hash = entry.hash;
  const std::string final_path = store_shard_path(store, entry.hash);
  const std::string tmp = store_tmp_dir(store) + "/" + unique_tmp_name(entry.hash.hex() + ".shard");
  Status st = [&]() -> Status {
    MOE_ASSIGN_OR_RETURN(auto file, env.new_writable_file(tmp));
    MOE_RETURN_IF_ERROR(write_shard(*file, header, payload));
    MOE_RETURN_IF_ERROR(file->sync());
    MOE_RETURN_IF_ERROR(file->close());
    return env.rename_file(tmp, final_path);
  }();
  if (!st.ok()) {
    (void)env.remove_file(tmp);
    return st.with_context("writing shard " + entry.id + " (" + entry.describe() + ")");
  }
  return ok_status();
}

void add_codec_report(std::vector<CodecReport>& reports, Codec codec, uint64_t raw, uint64_t stored, double seconds,
                      int shards) {
  auto it = std::find_if(reports.begin(), reports.end(), [&](const CodecReport& r) { return r.codec == codec; });
  if (it == reports.end()) {
    reports.push_back({});
    it = reports.end() - 1;
    it->codec = codec;
  }
  it->raw_bytes += raw;
  it->stored_bytes += stored;
  it->seconds += seconds;
  it->shards += shards;
}

// Checks the store's current version against what is being saved: same model, and no
// version at all for a convert (require_new_store).
Status check_current(const std::string& store, const SavePlan& plan, const SaveOptions& options,
                     const std::string& model_dir, int64_t current) {
  if (current == 0) return ok_status();
  if (options.require_new_store) {
    return failed_precondition("store " + store + " already holds version " + std::to_string(current) +
                               "; converting needs a new or empty store (use save to add a version)");
  }
  MOE_ASSIGN_OR_RETURN(Manifest previous, load_manifest(store, current));
  if (previous.fingerprint != plan.fingerprint) {
    return failed_precondition("store " + store + " holds another model: its version " + std::to_string(current) +
                               " is model_type '" + previous.model_type + "' with fingerprint " +
                               previous.fingerprint.hex() + ", but " + model_dir + " is model_type '" +
                               plan.model_type + "' with fingerprint " + plan.fingerprint.hex() +
                               " (fingerprint mismatch: tensor names, dtypes or shapes differ)");
  }
  return ok_status();
}

// Whether `previous` lists exactly these shards (ids, kinds, hashes, file names), these
// safetensors layouts and this config.
bool same_content(const Manifest& previous, const std::vector<PlannedShard>& shards, const SavePlan& plan) {
  if (previous.shards.size() != shards.size() || previous.hf_files.size() != plan.hf_files.size() ||
      previous.config_json != plan.config_json) {
    return false;
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardEntry& a = previous.shards[i];
    const ShardEntry& b = shards[i].entry;
    if (a.id != b.id || a.kind != b.kind || a.hash != b.hash || a.file_name != b.file_name) return false;
  }
  for (size_t i = 0; i < plan.hf_files.size(); ++i) {
    const HfFileLayout& a = previous.hf_files[i];
    const HfFileLayout& b = plan.hf_files[i];
    if (a.name != b.name || a.header_shard != b.header_shard || a.tensors != b.tensors) return false;
  }
  return true;
}

// Refuses a store inside the model directory (a save would copy the store into itself)
// or a model directory inside the store.
Status check_not_nested(const std::string& model_dir, const std::string& store) {
  std::error_code ec;
  const std::filesystem::path m = std::filesystem::weakly_canonical(model_dir, ec);
  if (ec) return ok_status();  // plan_save reports a bad model directory
  const std::filesystem::path s = std::filesystem::weakly_canonical(store, ec);
  if (ec) return ok_status();
  auto inside = [](const std::filesystem::path& a, const std::filesystem::path& b) {  // a is b or under it
    auto [ib, ia] = std::mismatch(b.begin(), b.end(), a.begin(), a.end());
    return ib == b.end();
  };
  if (inside(s, m)) {
    return failed_precondition("store " + store + " is inside the model directory " + model_dir +
                               ": a save would copy the store into itself; put the store elsewhere");
  }
  if (inside(m, s)) {
    return failed_precondition("model directory " + model_dir + " is inside the store " + store);
  }
  return ok_status();
}

StatusOr<SaveReport> save_locked(const std::string& model_dir, const std::string& store, const SaveOptions& options,
                                 StoreEnv& env, SavePlan& plan, const Codec* forced) {
  const auto start = Clock::now();
  SaveReport report;
  MOE_ASSIGN_OR_RETURN(const int64_t current, read_current_or_zero(store));
  MOE_RETURN_IF_ERROR(check_current(store, plan, options, model_dir, current));
  MOE_RETURN_IF_ERROR(clear_store_tmp(env, store).status());

  // 1. Hash every shard.
  std::vector<PlannedShard>& shards = plan.shards;
  uint64_t total_raw = 0;
  for (const auto& s : shards) total_raw += s.entry.raw_bytes;
  MOE_RETURN_IF_ERROR(run_parallel(
      shards.size(), options.threads, "hashing", total_raw, options.progress,
      [&](size_t i, std::atomic<uint64_t>& done) -> Status {
        Hasher128 hasher;
        for (const auto& piece : shards[i].pieces) hasher.update(piece.data, piece.size);
        shards[i].entry.hash = hasher.digest();
        done += shards[i].entry.raw_bytes;
        return ok_status();
      }));

  // 2. Which hashes are new: the first shard of each hash not already stored is written;
  //    every other one takes the codec and size of the stored (or written) copy.
  std::map<Hash128, size_t> first_of_hash;
  std::vector<size_t> to_write;
  std::vector<size_t> duplicates;
  for (size_t i = 0; i < shards.size(); ++i) {
    ShardEntry& entry = shards[i].entry;
    if (first_of_hash.count(entry.hash)) {
      duplicates.push_back(i);
      continue;
    }
    first_of_hash[entry.hash] = i;
    auto header = read_shard_header(store_shard_path(store, entry.hash));
    if (header.ok() && header->hash == entry.hash && header->raw_bytes == entry.raw_bytes) {
      entry.codec = header->codec;
      entry.element_bytes = header->element_bytes;
      entry.stored_bytes = header->stored_bytes;
      report.shards_skipped += 1;
      report.raw_bytes_skipped += entry.raw_bytes;
    } else {
      to_write.push_back(i);
    }
  }

  // Nothing new to write and the same shards, files and config as the current version:
  // no new version (it would only push real ones out of `gc --keep`).
  if (to_write.empty() && current > 0) {
    MOE_ASSIGN_OR_RETURN(Manifest previous, load_manifest(store, current));
    if (same_content(previous, shards, plan)) {
      report.version = current;
      report.unchanged = true;
      report.seconds = seconds_since(start);
      return report;
    }
  }

  // 3. Encode and write the new shards.
  std::set<std::string> shard_dirs;
  for (size_t i : to_write) {
    shard_dirs.insert(std::filesystem::path(store_shard_path(store, shards[i].entry.hash)).parent_path().string());
  }
  for (const auto& dir : shard_dirs) MOE_RETURN_IF_ERROR(env.create_dirs(dir));
  uint64_t write_raw = 0;
  for (size_t i : to_write) write_raw += shards[i].entry.raw_bytes;
  std::vector<Encoded> encoded(to_write.size());
  MOE_RETURN_IF_ERROR(run_parallel(to_write.size(), options.threads, "writing", write_raw, options.progress,
                                   [&](size_t k, std::atomic<uint64_t>& done) -> Status {
                                     const PlannedShard& shard = shards[to_write[k]];
                                     MOE_RETURN_IF_ERROR(write_one_shard(env, store, shard, options, forced, &encoded[k]));
                                     done += shard.entry.raw_bytes;
                                     return ok_status();
                                   }));
  for (const auto& dir : shard_dirs) MOE_RETURN_IF_ERROR(env.sync_dir(dir));
  if (!shard_dirs.empty()) MOE_RETURN_IF_ERROR(env.sync_dir(std::filesystem::path(*shard_dirs.begin()).parent_path().string()));
  for (size_t k = 0; k < to_write.size(); ++k) {
    ShardEntry& entry = shards[to_write[k]].entry;
    entry.codec = encoded[k].codec;
    entry.element_bytes = encoded[k].element_bytes;
    entry.stored_bytes = encoded[k].stored_bytes;
    report.shards_written += 1;
    report.raw_bytes_written += entry.raw_bytes;
    report.stored_bytes_written += entry.stored_bytes;
    // Per codec: the bytes and time of every trial; `shards` counts where it was chosen.
    for (const auto& trial : encoded[k].trials) {
      add_codec_report(report.codecs, trial.codec, entry.raw_bytes, trial.stored_bytes, trial.seconds,
                       trial.codec == entry.codec ? 1 : 0);
    }
    if (entry.codec == Codec::kRaw && (forced == nullptr || *forced != Codec::kRaw)) {
      add_codec_report(report.codecs, Codec::kRaw, entry.raw_bytes, entry.raw_bytes, 0, 1);
    }
  }
  for (size_t i : duplicates) {
    ShardEntry& entry = shards[i].entry;
    const ShardEntry& first = shards[first_of_hash[entry.hash]].entry;
    entry.codec = first.codec;
    entry.element_bytes = first.element_bytes;
    entry.stored_bytes = first.stored_bytes;
    report.shards_skipped += 1;
    report.raw_bytes_skipped += entry.raw_bytes;
  }

  // 4. The manifest, then CURRENT.
  // The next version: current + 1 (over a manifest a failed save left after it, which was
  // never committed). Without CURRENT (lost, or a first save that failed before it),
  // above every manifest present, so none is written over.
  MOE_ASSIGN_OR_RETURN(const std::vector<int64_t> present, manifest_versions(env, store));
  Manifest manifest;
  manifest.version = (current > 0 || present.empty() ? current : present.back()) + 1;
  manifest.parent_version = current;
  manifest.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  manifest.model_type = plan.model_type;
  manifest.fingerprint = plan.fingerprint;
  manifest.config_json = plan.config_json;
  manifest.source_dir = plan.source_dir;
  for (const auto& s : shards) manifest.shards.push_back(s.entry);
  manifest.hf_files = plan.hf_files;
  MOE_RETURN_IF_ERROR(
      write_file_durably(env, store, store_manifest_path(store, manifest.version), manifest_to_json(manifest)));
  MOE_RETURN_IF_ERROR(env.sync_dir(store));
  MOE_RETURN_IF_ERROR(
      write_file_durably(env, store, store_current_path(store), manifest_file_name(manifest.version) + "\n"));
  MOE_RETURN_IF_ERROR(env.sync_dir(store));
  report.version = manifest.version;
  report.seconds = seconds_since(start);
  return report;
}

}  // namespace

StatusOr<SaveReport> save_to_store(const std::string& model_dir, const std::string& store, const SaveOptions& options) {
  StoreEnv& env = options.env != nullptr ? *options.env : default_store_env();
  Codec forced_codec = Codec::kRaw;
  const Codec* forced = nullptr;
  if (options.codec != "auto") {
    MOE_ASSIGN_OR_RETURN(forced_codec, parse_codec(options.codec));
    forced = &forced_codec;
  }
  if (options.threads < 1) {
    return invalid_argument("save threads must be >= 1, got " + std::to_string(options.threads));
  }
  MOE_RETURN_IF_ERROR(check_not_nested(model_dir, store));
  // The model first: a bad model directory changes nothing in the store.
  MOE_ASSIGN_OR_RETURN(SavePlan plan, plan_save(model_dir, store));
  MOE_RETURN_IF_ERROR(check_store_dir(store));
  MOE_RETURN_IF_ERROR(env.create_dirs(store));
  MOE_RETURN_IF_ERROR(env.create_dirs(store_tmp_dir(store)));
  MOE_ASSIGN_OR_RETURN(StoreLock lock, StoreLock::acquire(store));
  auto report = save_locked(model_dir, store, options, env, plan, forced);
  if (!report.ok()) {
    // Best effort: the next save or gc removes what this one left in tmp/.
    (void)clear_store_tmp(env, store);
  }
  return report;
}

}  // namespace moe
