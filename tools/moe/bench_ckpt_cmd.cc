// moe bench ckpt: the checkpoint store's figures (docs/performance.md), each A/B pair
// measured interleaved (A, B, A, B ...) and reported as the median of --rounds:
//   codecs:      plain zstd vs zstd byte planes at each --levels, over the store's own
//                shards: ratio, compress and decompress MB/s;
//   restore:     GB/s of raw weights restored (read + decode + hash) at 1 and 2
//                threads, all experts vs one rank's share of --num-ranks, against
//                reading the shard files (cat > /dev/null) and memcpy of the raw bytes;
//   incremental: a save after changing one expert vs a full save: time and bytes;
//   cold start:  Engine::open and the first token, from the store vs from the Hugging Face
//                directory.
// Everything is written under --work-dir (removed at the end unless --keep).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/core/text_format.h"
#include "moe/engine.h"
#include "moe/model/config.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/weight_names.h"
#include "moe/store/codec.h"
#include "moe/store/store_model.h"
#include "moe/store/store_reader.h"
#include "moe/store/store_writer.h"

namespace moe::cli {
namespace {

namespace fs = std::filesystem;

struct BenchCkptFlags {
  std::string model;
  std::string work_dir = "/tmp/moe-bench-ckpt";
  std::vector<int> levels = {1, 3, 9};
  int rounds = 3;
  int num_ranks = 4;
  int engine_threads = 1;
  bool keep = false;
  bool cold = false;  // drop the page cache before each restore / cold-start case
  std::vector<std::string> only;  // sections to run; empty = all
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string f2(double v) { return format_fixed(v, 2); }
std::string f3(double v) { return format_fixed(v, 3); }

// Writes back dirty pages and drops the page cache (root only), so the next read comes
// from the disk.
Status drop_page_cache() {
  if (std::system("sync") != 0) return internal_error("sync failed");
  std::ofstream out("/proc/sys/vm/drop_caches");
  out << "3\n";
  out.close();
  if (!out) return failed_precondition("--cold: cannot write /proc/sys/vm/drop_caches (needs root)");
  return ok_status();
}

bool wants(const BenchCkptFlags& f, const std::string& section) {
  return f.only.empty() || std::find(f.only.begin(), f.only.end(), section) != f.only.end();
}

// Every shard's raw bytes of the store's current version, with its element size.
struct RawShard {
  std::vector<uint8_t> bytes;
  int element_bytes = 1;
};

StatusOr<std::vector<RawShard>> read_raw_shards(const std::string& store) {
  MOE_ASSIGN_OR_RETURN(int64_t version, current_version(store));
  MOE_ASSIGN_OR_RETURN(Manifest m, read_manifest(store, version));
  std::vector<RawShard> out;
  for (const ShardEntry& e : m.shards) {
    if (e.kind == ShardKind::kFile) continue;  // headers, config, tokenizer: not weights
    RawShard r;
    r.bytes.resize(e.raw_bytes);
    r.element_bytes = e.element_bytes;
    MOE_RETURN_IF_ERROR(read_shard_verified(store, m, e, r.bytes).status());
    out.push_back(std::move(r));
  }
  return out;
}

Status bench_codecs(const BenchCkptFlags& f, const std::vector<RawShard>& shards) {
  uint64_t raw_total = 0;
  for (const RawShard& s : shards) raw_total += s.bytes.size();
  std::printf("\n== codecs: %zu weight shards, %s MB raw ==\n", shards.size(), f2(raw_total / 1e6).c_str());
  std::printf("%5s  %-12s  %8s  %14s  %16s\n", "level", "codec", "ratio", "compress MB/s", "decompress MB/s");
  for (int level : f.levels) {
    const Codec codecs[2] = {Codec::kZstd, Codec::kZstdPlanes};
    std::vector<double> enc_s[2], dec_s[2];
    uint64_t stored[2] = {0, 0};
    for (int round = 0; round < f.rounds; ++round) {
      for (int c = 0; c < 2; ++c) {  // interleaved: zstd, planes, zstd, planes ...
        double enc = 0, dec = 0;
        uint64_t total = 0;
        for (const RawShard& s : shards) {
          const int eb = codecs[c] == Codec::kZstdPlanes ? s.element_bytes : 1;
          const Codec codec = codecs[c] == Codec::kZstdPlanes && eb != 2 ? Codec::kZstd : codecs[c];
          double t0 = now_s();
          MOE_ASSIGN_OR_RETURN(std::vector<uint8_t> enc_bytes, encode(codec, s.bytes, eb, CodecOptions{.level = level}));
          double t1 = now_s();
          std::vector<uint8_t> back(s.bytes.size());
          MOE_RETURN_IF_ERROR(decode(codec, enc_bytes, eb, back));
          double t2 = now_s();
          if (back != s.bytes) return internal_error("codec round trip differs");
          enc += t1 - t0;
          dec += t2 - t1;
          total += enc_bytes.size();
        }
        enc_s[c].push_back(enc);
        dec_s[c].push_back(dec);
        stored[c] = total;
      }
    }
    for (int c = 0; c < 2; ++c) {
      std::printf("%5d  %-12s  %8s  %14s  %16s\n", level, codec_name(codecs[c]),
                  f3(static_cast<double>(raw_total) / static_cast<double>(stored[c])).c_str(),
                  format_fixed(raw_total / 1e6 / median(enc_s[c]), 1).c_str(),
                  format_fixed(raw_total / 1e6 / median(dec_s[c]), 1).c_str());
    }
  }
  return ok_status();
}

Status bench_restore(const BenchCkptFlags& f, const std::string& store) {
  MOE_ASSIGN_OR_RETURN(auto probe, StoreModel::open(store));
  const int num_experts = [&] {
    int e = 0;
    for (const ShardEntry& s : probe->manifest().shards) e = std::max(e, s.expert + 1);
    return e;
  }();
  const int R = f.num_ranks;
  ExpertFilter one_rank = [num_experts, R](int, int e) { return e * R / std::max(num_experts, 1) == 0; };
  struct Case {
    std::string name;
    std::function<StatusOr<uint64_t>()> run;  // returns raw bytes handled
  };
  auto restore_case = [&](const ExpertFilter& want, int threads) {
    return [&store, want, threads]() -> StatusOr<uint64_t> {
      MOE_ASSIGN_OR_RETURN(auto model, StoreModel::open(store));
      RestoreReport rep;
      RestoreOptions ro;
      ro.threads = threads;
      MOE_RETURN_IF_ERROR(model->restore(want, ro, &rep));
      return rep.raw_bytes;
    };
  };
  const uint64_t raw_total = probe->manifest().total_raw_bytes();
  std::vector<uint8_t> src(raw_total, 1), dst(raw_total, 0);
  const std::string cat = "find '" + store + "/shards' -type f -exec cat {} + > /dev/null";
  std::vector<Case> cases = {
      {"restore all, 1 thread", restore_case(nullptr, 1)},
      {"restore all, 2 threads", restore_case(nullptr, 2)},
      {"restore 1 rank of " + std::to_string(R) + ", 1 thread", restore_case(one_rank, 1)},
      {"restore 1 rank of " + std::to_string(R) + ", 2 threads", restore_case(one_rank, 2)},
      {"cat shard files > /dev/null", [&]() -> StatusOr<uint64_t> {
         if (std::system(cat.c_str()) != 0) return internal_error("failed: " + cat);
         return raw_total;
       }},
      {"first touch of new memory (memset)", [&]() -> StatusOr<uint64_t> {
         // What restoring into fresh buffers costs before any decoding: on a VM that
         // backs guest memory lazily this, not zstd, bounds restore.
         std::unique_ptr<uint8_t[]> fresh(new uint8_t[raw_total]);
         std::memset(fresh.get(), 1, raw_total);
         asm volatile("" : : "r"(fresh.get()) : "memory");  // keep the stores
         return raw_total;
       }},
      {"memcpy of the raw bytes", [&]() -> StatusOr<uint64_t> {
         std::memcpy(dst.data(), src.data(), raw_total);
         return raw_total;
       }},
  };
  std::vector<std::vector<double>> secs(cases.size());
  std::vector<uint64_t> bytes(cases.size(), 0);
  for (int round = 0; round <= f.rounds; ++round) {  // round 0 warms the page cache
    for (size_t c = 0; c < cases.size(); ++c) {
      if (f.cold && c + 2 < cases.size()) MOE_RETURN_IF_ERROR(drop_page_cache());  // not before memset, memcpy
      const double t0 = now_s();
      MOE_ASSIGN_OR_RETURN(bytes[c], cases[c].run());
      if (round > 0) secs[c].push_back(now_s() - t0);
    }
  }
  std::printf("\n== restore: %s MB raw in the store (page cache %s; median of %d) ==\n", f2(raw_total / 1e6).c_str(),
              f.cold ? "dropped before each case" : "warm", f.rounds);
  std::printf("%-32s  %10s  %9s  %8s  %14s\n", "case", "raw MB", "seconds", "GB/s", "vs restore all");
  const double all1 = median(secs[0]);
  for (size_t c = 0; c < cases.size(); ++c) {
    const double s = median(secs[c]);
    std::printf("%-32s  %10s  %9s  %8s  %14s\n", cases[c].name.c_str(), f2(bytes[c] / 1e6).c_str(), f3(s).c_str(),
                f2(bytes[c] / 1e9 / s).c_str(), f3(s / all1).c_str());
  }
  return ok_status();
}

// Changes a few bytes of expert (layer, expert)'s w1 in the HF directory `dir`, in place.
Status touch_expert(const std::string& dir, int layer, int expert, uint8_t salt) {
  MOE_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  const std::string name = weight_names_for(config.family).expert(layer, expert, weight_names_for(config.family).expert_w1);
  MOE_ASSIGN_OR_RETURN(HfCheckpoint ckpt, HfCheckpoint::open(dir));
  MOE_ASSIGN_OR_RETURN(const StoredTensor* t, ckpt.get(name));
  const std::string file = t->file;
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  io.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  io.read(header.data(), static_cast<std::streamsize>(n));
  auto j = nlohmann::json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.contains(name)) return internal_error(file + ": cannot find " + name);
  const uint64_t begin = 8 + n + j[name]["data_offsets"][0].get<uint64_t>();
  const char bytes[4] = {static_cast<char>(salt), static_cast<char>(salt + 1), static_cast<char>(salt + 2), 0};
  io.seekp(static_cast<std::streamoff>(begin));
  io.write(bytes, 3);
  return io.good() ? ok_status() : internal_error("cannot write " + file);
}

Status bench_incremental(const BenchCkptFlags& f, const std::string& model) {
  const std::string copy = f.work_dir + "/model-copy", inc = f.work_dir + "/store-incremental",
                    full = f.work_dir + "/store-full";
  fs::remove_all(copy);
  fs::copy(model, copy, fs::copy_options::recursive);
  SaveOptions opts;
  MOE_RETURN_IF_ERROR(save_to_store(copy, inc, opts).status());
  MOE_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(copy));
  int layer = 0;
  while (layer < config.num_hidden_layers && !config.is_moe_layer(layer)) ++layer;
  std::vector<double> full_s, inc_s;
  SaveReport full_rep, inc_rep;
  for (int round = 0; round < f.rounds; ++round) {
    fs::remove_all(full);
    double t0 = now_s();
    MOE_ASSIGN_OR_RETURN(full_rep, save_to_store(copy, full, opts));
    full_s.push_back(now_s() - t0);
    MOE_RETURN_IF_ERROR(touch_expert(copy, layer, round % config.router.num_experts, static_cast<uint8_t>(round * 7 + 1)));
    t0 = now_s();
    MOE_ASSIGN_OR_RETURN(inc_rep, save_to_store(copy, inc, opts));
    inc_s.push_back(now_s() - t0);
  }
  int expert_shards = 0;
  {
    MOE_ASSIGN_OR_RETURN(int64_t v, current_version(inc));
    MOE_ASSIGN_OR_RETURN(Manifest m, read_manifest(inc, v));
    for (const ShardEntry& s : m.shards) expert_shards += s.kind == ShardKind::kExpert ? 1 : 0;
  }
  std::printf("\n== incremental save: 1 expert of %d per MoE layer changed (%d expert shards), codec auto, level 3 ==\n",
              config.router.num_experts, expert_shards);
  std::printf("%-18s  %9s  %14s  %14s  %8s\n", "save", "seconds", "shards written", "stored MB", "skipped");
  std::printf("%-18s  %9s  %14d  %14s  %8d\n", "full (new store)", f3(median(full_s)).c_str(), full_rep.shards_written,
              f2(full_rep.stored_bytes_written / 1e6).c_str(), full_rep.shards_skipped);
  std::printf("%-18s  %9s  %14d  %14s  %8d\n", "incremental", f3(median(inc_s)).c_str(), inc_rep.shards_written,
              f2(inc_rep.stored_bytes_written / 1e6).c_str(), inc_rep.shards_skipped);
  std::printf("incremental / full: time %s, bytes written %s\n", f3(median(inc_s) / median(full_s)).c_str(),
              f3(static_cast<double>(inc_rep.stored_bytes_written) / static_cast<double>(full_rep.stored_bytes_written)).c_str());
  return ok_status();
}

Status bench_cold_start(const BenchCkptFlags& f, const std::string& model, const std::string& store) {
  std::vector<double> hf_s, store_s;
  for (int round = 0; round <= f.rounds; ++round) {
    for (int which = 0; which < 2; ++which) {
      EngineOptions eo{.model_dir = which == 0 ? model : store};
      eo.num_threads = f.engine_threads;
      if (f.cold) MOE_RETURN_IF_ERROR(drop_page_cache());
      const double t0 = now_s();
      MOE_ASSIGN_OR_RETURN(auto engine, Engine::open(eo));
      // To the first token: a memory-mapped model reads its pages here, a restored one
      // already has them.
      GenerateRequest req{.prompt = "ROMEO:", .max_tokens = 1};
      req.sampling.temperature = 0;
      MOE_RETURN_IF_ERROR(engine->generate(req).status());
      const double s = now_s() - t0;
      if (round > 0) (which == 0 ? hf_s : store_s).push_back(s);
    }
  }
  std::printf("\n== cold start: Engine::open + first token of a 6-token prompt, %d thread(s), page cache %s (median "
              "of %d) ==\n", f.engine_threads, f.cold ? "dropped before each" : "warm",
              f.rounds);
  std::printf("from HF safetensors (mmap):   %s s\n", f3(median(hf_s)).c_str());
  std::printf("from the store (restore):     %s s (%sx)\n", f3(median(store_s)).c_str(),
              f2(median(store_s) / median(hf_s)).c_str());
  return ok_status();
}

int run(const BenchCkptFlags& f) {
  if (f.rounds < 1) return fail("--rounds must be >= 1");
  if (f.num_ranks < 1) return fail("--num-ranks must be >= 1");
  for (int l : f.levels) {
    if (l < 1 || l > 19) return fail("--levels: " + std::to_string(l) + " is not a zstd level (1..19)");
  }
  const std::string model = f.model.empty() ? default_model_dir() : f.model;
  std::error_code ec;
  fs::create_directories(f.work_dir, ec);
  if (ec) return fail("--work-dir " + f.work_dir + ": " + ec.message());
  const std::string store = f.work_dir + "/store";
  fs::remove_all(store);
  std::printf("model %s, work dir %s, %d rounds\n", model.c_str(), f.work_dir.c_str(), f.rounds);
  auto conv = save_to_store(model, store, SaveOptions{});
  if (!conv.ok()) return fail(conv.status().message());
  Status s = ok_status();
  if (s.ok() && wants(f, "codecs")) {
    auto shards = read_raw_shards(store);
    s = shards.ok() ? bench_codecs(f, shards.value()) : shards.status();
  }
  if (s.ok() && wants(f, "restore")) s = bench_restore(f, store);
  if (s.ok() && wants(f, "incremental")) s = bench_incremental(f, model);
  if (s.ok() && wants(f, "cold-start")) s = bench_cold_start(f, model, store);
  if (!f.keep) fs::remove_all(f.work_dir, ec);
  return s.ok() ? 0 : fail(s.message());
}

}  // namespace

RunFn add_bench_ckpt_command(CLI::App& app) {
  auto f = std::make_shared<BenchCkptFlags>();
  app.add_option("--model", f->model, "Hugging Face model directory (default: the shipped model)");
  app.add_option("--work-dir", f->work_dir, "scratch directory for stores and copies")->capture_default_str();
  app.add_option("--levels", f->levels, "zstd levels of the codec study")->capture_default_str()->delimiter(',');
  app.add_option("--rounds", f->rounds, "measured rounds per case (interleaved)")->capture_default_str();
  app.add_option("--num-ranks", f->num_ranks, "restore one rank's experts of this many")->capture_default_str();
  app.add_option("--engine-threads", f->engine_threads, "threads of Engine::open (cold start)")->capture_default_str();
  app.add_option("--only", f->only, "sections: codecs, restore, incremental, cold-start (default all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"codecs", "restore", "incremental", "cold-start"}));
  app.add_flag("--keep", f->keep, "keep --work-dir afterwards");
  app.add_flag("--cold", f->cold, "drop the page cache before each restore and cold-start case (root)");
  return [f] { return run(*f); };
}

}  // namespace moe::cli
