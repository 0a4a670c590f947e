// moe ckpt: the per-expert checkpoint store (src/moe/store/, docs/checkpoint-store.md).
//
//   moe ckpt convert --from MODEL_DIR --store STORE     first version of a new store
//   moe ckpt save    --from MODEL_DIR --store STORE     a new version: writes only changed shards
//   moe ckpt restore --store STORE --out DIR            back to a Hugging Face directory, byte-exact
//   moe ckpt verify  --store STORE                      every hash; exit 1 naming each bad shard
//   moe ckpt info    --store STORE                      versions, sizes, ratio per codec
//   moe ckpt gc      --store STORE --keep N             drop old versions and unreferenced shards
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/core/text_format.h"
#include "moe/store/manifest.h"
#include "moe/store/shard_file.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_maintenance.h"
#include "moe/store/store_reader.h"
#include "moe/store/store_writer.h"
#include "progress_printer.h"

namespace moe::cli {
namespace {

struct CkptFlags {
  std::string from;
  std::string store;
  std::string out;
  std::string codec = "auto";
  int level = 3;
  int threads = 1;
  int zstd_threads = 1;
  int64_t version = 0;
  int keep = 2;
  std::string format = "table";
  bool quiet = false;
  bool level_given = false;         // --level / --zstd-threads set on the command line
  bool zstd_threads_given = false;
};

std::string mb(uint64_t bytes) { return format_fixed(static_cast<double>(bytes) / 1e6, 2) + " MB"; }

std::string ratio(uint64_t raw, uint64_t stored) {
  return stored == 0 ? "-" : format_fixed(static_cast<double>(raw) / static_cast<double>(stored), 3);
}

int run_save(const CkptFlags& f, bool convert) {
  if (f.codec == "raw" && (f.level_given || f.zstd_threads_given)) {
    return fail(std::string(f.level_given ? "--level" : "--zstd-threads") +
                " has no effect with --codec raw (nothing is compressed)");
  }
  SaveOptions opts;
  opts.codec = f.codec;
  opts.codec_options.level = f.level;
  opts.codec_options.threads = f.zstd_threads;
  opts.threads = f.threads;
  opts.require_new_store = convert;
  auto printer = std::make_shared<ProgressPrinter>(!f.quiet);
  opts.progress = [printer](const std::string& what, uint64_t done, uint64_t total) {
    printer->update(what, done, total);
  };
  auto report = save_to_store(f.from, f.store, opts);
  printer->finish();
  if (!report.ok()) return fail(report.status().message());
  const SaveReport& r = report.value();
  if (r.unchanged) {
    std::printf("unchanged: %s is version %lld of the store already (every shard stored and intact); no new version\n",
                f.from.c_str(), static_cast<long long>(r.version));
    return 0;
  }
  std::printf("%s %s as version %lld in %s s\n", convert ? "converted" : "saved", f.from.c_str(),
              static_cast<long long>(r.version), format_fixed(r.seconds, 2).c_str());
  std::printf("  written: %d shards, %s raw -> %s stored\n", r.shards_written, mb(r.raw_bytes_written).c_str(),
              mb(r.stored_bytes_written).c_str());
  std::printf("  skipped: %d shards (already stored), %s raw\n", r.shards_skipped, mb(r.raw_bytes_skipped).c_str());
  // Every written shard was encoded with each candidate codec (--codec auto) and kept the
  // smallest: per codec, the shards it won, and its total over all shards it was tried on.
  for (const CodecReport& c : r.codecs) {
    if (c.raw_bytes == 0) continue;
    std::printf("  codec %-12s chosen for %3d shards; tried on %s raw -> %s, ratio %s, %s MB/s per thread\n",
                codec_name(c.codec), c.shards, mb(c.raw_bytes).c_str(), mb(c.stored_bytes).c_str(),
                ratio(c.raw_bytes, c.stored_bytes).c_str(),
                c.seconds > 0 ? format_fixed(static_cast<double>(c.raw_bytes) / 1e6 / c.seconds, 1).c_str() : "-");
  }
  return 0;
}

int run_restore(const CkptFlags& f) {
  ProgressPrinter printer(!f.quiet);
  Status s = export_hf(f.store, f.version, f.out,
                       [&printer](const std::string& what, uint64_t done, uint64_t total) {
                         printer.update(what, done, total);
                       });
  printer.finish();
  if (!s.ok()) return fail(s.message());
  int64_t version = f.version;
  if (version == 0) {
    auto cur = current_version(f.store);
    version = cur.ok() ? cur.value() : 0;
  }
  std::printf("restored version %lld of %s to %s (every hash verified)\n", static_cast<long long>(version),
              f.store.c_str(), f.out.c_str());
  return 0;
}

int run_verify(const CkptFlags& f) {
  ProgressPrinter printer(!f.quiet);
  auto report = verify_store(f.store, f.version, f.threads,
                             [&printer](const std::string& what, uint64_t done, uint64_t total) {
                               printer.update(what, done, total);
                             });
  printer.finish();
  if (!report.ok()) return fail(report.status().message());
  const VerifyReport& r = report.value();
  if (r.bad.empty()) {
    std::printf("ok: version %lld, %d shards, %s verified\n", static_cast<long long>(r.version), r.shards_checked,
                mb(r.raw_bytes).c_str());
    return 0;
  }
  for (const BadShard& b : r.bad) {
    // The problem text names the file when the file was read; otherwise name it here.
    const bool names_path = b.problem.find(b.path) != std::string::npos;
    std::fprintf(stderr, "bad shard: %s (%s): %s%s%s\n", b.description.c_str(), b.id.c_str(),
                 names_path ? "" : b.path.c_str(), names_path ? "" : ": ", b.problem.c_str());
  }
  if (!r.bad.empty()) {
    std::fprintf(stderr, "to repair: delete the bad shard files and run `moe ckpt save` from a good model directory "
                         "(it rewrites missing shards)\n");
  }
  std::fprintf(stderr, "error: version %lld: %zu of %d shards are bad\n", static_cast<long long>(r.version),
               r.bad.size(), r.shards_checked);
  return 1;
}

// Bytes on disk of every shard file under STORE/shards.
uint64_t shard_files_bytes(const std::string& store, int* count) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(store + "/shards", ec)) {
    if (e.is_regular_file()) {
      total += e.file_size();
      ++*count;
    }
  }
  return total;
}

int run_info(const CkptFlags& f) {
  auto versions = list_versions(f.store);
  if (!versions.ok()) return fail(versions.status().message());
  auto current = current_version(f.store);
  if (!current.ok()) return fail(current.status().message());
  nlohmann::json j;
  j["store"] = f.store;
  j["current_version"] = current.value();
  j["versions"] = nlohmann::json::array();
  Manifest cur;
  Status current_status = not_found(store_current_path(f.store) + " names version " +
                                    std::to_string(current.value()) + ", whose manifest " +
                                    manifest_file_name(current.value()) + " is missing");
  for (int64_t v : versions.value()) {
    auto m = read_manifest(f.store, v);
    if (!m.ok()) {  // listed, so the other versions stay visible
      j["versions"].push_back({{"version", v}, {"committed", v <= current.value()}, {"error", m.status().message()}});
      if (v == current.value()) current_status = m.status();
      continue;
    }
    if (v == current.value()) current_status = ok_status();
    int experts = 0;
    for (const ShardEntry& s : m.value().shards) experts += s.kind == ShardKind::kExpert ? 1 : 0;
    j["versions"].push_back({{"version", v},
                             {"committed", v <= current.value()},
                             {"created_unix_ms", m.value().created_unix_ms},
                             {"model_type", m.value().model_type},
                             {"shards", m.value().shards.size()},
                             {"expert_shards", experts},
                             {"raw_bytes", m.value().total_raw_bytes()},
                             {"stored_bytes", m.value().total_stored_bytes()}});
    if (v == current.value()) cur = std::move(m).value();
  }
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_codec;  // raw, stored
  std::map<std::string, int> shards_by_codec;
  for (const ShardEntry& s : cur.shards) {
    auto& p = by_codec[codec_name(s.codec)];
    p.first += s.raw_bytes;
    p.second += s.stored_bytes;
    ++shards_by_codec[codec_name(s.codec)];
  }
  j["codecs"] = nlohmann::json::array();
  for (const auto& [name, p] : by_codec) {
    j["codecs"].push_back({{"codec", name}, {"shards", shards_by_codec[name]}, {"raw_bytes", p.first}, {"stored_bytes", p.second}});
  }
  int files = 0;
  const uint64_t disk = shard_files_bytes(f.store, &files);
  j["shard_files"] = files;
  j["shard_files_bytes"] = disk;
  if (f.format == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return current_status.ok() ? 0 : fail(current_status.message());
  }
  std::printf("store %s: current version %lld (*), %d shard files, %s on disk\n", f.store.c_str(),
              static_cast<long long>(current.value()), files, mb(disk).c_str());
  std::printf("%8s  %-10s  %6s  %7s  %12s  %12s  %6s\n", "version", "model", "shards", "experts", "raw", "stored",
              "ratio");
  for (const auto& v : j["versions"]) {
    const int64_t ver = v["version"].get<int64_t>();
    if (v.contains("error")) {
      std::printf("%7lld%s  unreadable: %s\n", static_cast<long long>(ver), ver == current.value() ? "*" : " ",
                  v["error"].get<std::string>().c_str());
      continue;
    }
    std::printf("%7lld%s  %-10s  %6zu  %7d  %12s  %12s  %6s%s\n", static_cast<long long>(ver),
                ver == current.value() ? "*" : " ", v["model_type"].get<std::string>().c_str(),
                v["shards"].get<size_t>(), v["expert_shards"].get<int>(), mb(v["raw_bytes"].get<uint64_t>()).c_str(),
                mb(v["stored_bytes"].get<uint64_t>()).c_str(),
                ratio(v["raw_bytes"].get<uint64_t>(), v["stored_bytes"].get<uint64_t>()).c_str(),
                ver > current.value() ? "  (not committed: a save that failed; gc removes it)" : "");
  }
  std::printf("codecs of version %lld:\n", static_cast<long long>(current.value()));
  for (const auto& [name, p] : by_codec) {
    std::printf("  %-12s %4d shards  %12s raw -> %12s  ratio %s\n", name.c_str(), shards_by_codec[name],
                mb(p.first).c_str(), mb(p.second).c_str(), ratio(p.first, p.second).c_str());
  }
  return current_status.ok() ? 0 : fail(current_status.message());
}

int run_gc(const CkptFlags& f) {
  auto report = gc_store(f.store, f.keep);
  if (!report.ok()) return fail(report.status().message());
  const GcReport& r = report.value();
  std::string removed;
  for (int64_t v : r.versions_removed) removed += (removed.empty() ? "" : ", ") + std::to_string(v);
  std::printf("gc %s: removed %zu versions%s%s%s, %d shard files (%s)\n", f.store.c_str(), r.versions_removed.size(),
              removed.empty() ? "" : " (", removed.c_str(), removed.empty() ? "" : ")", r.shards_removed,
              mb(r.bytes_removed).c_str());
  return 0;
}

void add_codec_flags(CLI::App* app, CkptFlags* f) {
  app->add_option("--codec", f->codec, "auto (per shard, the smaller of zstd and zstd-planes), zstd, zstd-planes or raw")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "zstd", "zstd-planes", "raw"}));
  app->add_option("--level", f->level, "zstd compression level (1..19)")
      ->capture_default_str()
      ->check(CLI::Range(1, 19))
      ->each([f](const std::string&) { f->level_given = true; });
  app->add_option("--threads", f->threads, "shards encoded in parallel")->capture_default_str()->check(CLI::Range(1, 256));
  app->add_option("--zstd-threads", f->zstd_threads, "zstd worker threads per shard")
      ->capture_default_str()
      ->check(CLI::Range(1, 256))
      ->each([f](const std::string&) { f->zstd_threads_given = true; });
  app->add_flag("--quiet", f->quiet, "no progress on stderr");
}

}  // namespace

RunFn add_ckpt_command(CLI::App& ckpt) {
  auto f = std::make_shared<CkptFlags>();
  ckpt.require_subcommand(1);
  auto* convert = ckpt.add_subcommand("convert", "Convert a Hugging Face model directory into a new store");
  convert->add_option("--from", f->from, "Hugging Face model directory")->required();
  convert->add_option("--store", f->store, "store directory (created; must not hold a version)")->required();
  add_codec_flags(convert, f.get());
  auto* save = ckpt.add_subcommand("save", "Save a (changed) model directory as a new version: only changed shards are written");
  save->add_option("--from", f->from, "Hugging Face model directory")->required();
  save->add_option("--store", f->store, "store directory (created if missing)")->required();
  add_codec_flags(save, f.get());
  auto* restore = ckpt.add_subcommand("restore", "Write a version back as a Hugging Face directory, byte-exact");
  restore->add_option("--store", f->store, "store directory")->required();
  restore->add_option("--out", f->out, "output directory (created; must be empty)")->required();
  restore->add_option("--version", f->version, "version to restore (0: current)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{999999}));
  restore->add_flag("--quiet", f->quiet, "no progress on stderr");
  auto* verify = ckpt.add_subcommand("verify", "Read and hash every shard; exit 1 naming each bad one");
  verify->add_option("--store", f->store, "store directory")->required();
  verify->add_option("--version", f->version, "version to verify (0: current)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{999999}));
  verify->add_option("--threads", f->threads, "reader threads")->capture_default_str()->check(CLI::Range(1, 256));
  verify->add_flag("--quiet", f->quiet, "no progress on stderr");
  auto* info = ckpt.add_subcommand("info", "Versions, sizes and compression ratio per codec");
  info->add_option("--store", f->store, "store directory")->required();
  info->add_option("--format", f->format, "table or json")->capture_default_str()->check(CLI::IsMember({"table", "json"}));
  auto* gc = ckpt.add_subcommand("gc", "Keep the newest N versions; remove older manifests and unreferenced shards");
  gc->add_option("--store", f->store, "store directory")->required();
  gc->add_option("--keep", f->keep, "versions to keep, newest first (>= 1; the current one is always kept)")
      ->capture_default_str();
  return [f, convert, save, restore, verify, info, gc]() -> int {
    if (convert->parsed()) return run_save(*f, true);
    if (save->parsed()) return run_save(*f, false);
    if (restore->parsed()) return run_restore(*f);
    if (verify->parsed()) return run_verify(*f);
    if (info->parsed()) return run_info(*f);
    if (gc->parsed()) return run_gc(*f);
    return 2;
  };
}

}  // namespace moe::cli
