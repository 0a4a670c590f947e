// save_to_store: convert + export round trips byte for byte, incremental saves write only
// what changed, and every refusal (another model, a store with a version, an unwritable
// or foreign directory, a malformed model directory) leaves the store as it was.
#include "moe/store/store_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "contains_util.h"
#include "moe/store/content_hash.h"
#include "moe/store/manifest.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_maintenance.h"
#include "safetensors_util.h"
#include "store/store_test_util.h"
#include "test_util.h"

namespace moe {
namespace {

using ::moe::testing::ScopedTempDir;

std::string current_text(const std::string& store) { return testing::read_file(store_current_path(store)); }

Manifest load(const std::string& store, int64_t version) {
  auto parsed = parse_manifest(testing::read_file(store_manifest_path(store, version)), "test");
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  return parsed.ok() ? *parsed : Manifest{};
}

SaveOptions options_new() {
  SaveOptions o;
  o.require_new_store = true;
  return o;
}

// `xxhsum -H2 FILE`'s hash (the independent reference for content hashes).
std::string xxhsum(const std::string& path) {
  // xxhsum writes progress to stderr: keep stdout only.
  auto r = testing::run_command("(xxhsum -H2 '" + path + "' 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto space = r.output.find(' ');
  return r.output.substr(0, space);
}

TEST(StoreWriter, ConvertThenExportIsByteExact) {
  ScopedTempDir tmp("store_conv");
  const std::string store = tmp.file("store");
  uint64_t last_done = 0, last_total = 0;
  SaveOptions o = options_new();
  o.threads = 2;
  o.progress = [&](const std::string&, uint64_t done, uint64_t total) {
    last_done = done;
    last_total = total;
  };
  auto report = save_to_store(testing::tiny_model_dir(), store, o);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->version, 1);
  EXPECT_EQ(last_done, last_total);
  EXPECT_GT(last_total, 0u);

  // Expected shards from the directory itself: 4 layers x (1 + 8 experts), the model
  // shard, the safetensors header, and the 6 other files.
  const Manifest m = load(store, 1);
  EXPECT_EQ(m.shards.size(), 4u * 9u + 1u + 1u + 6u);
  EXPECT_EQ(report->shards_written + report->shards_skipped, static_cast<int>(m.shards.size()));
  EXPECT_EQ(report->shards_skipped, 0);
  EXPECT_EQ(current_text(store), "MANIFEST-000001\n");
  EXPECT_EQ(m.model_type, "mixtral");
  EXPECT_EQ(m.parent_version, 0);
  EXPECT_EQ(m.config_json, testing::read_file(testing::tiny_model_dir() + "/config.json"));
  EXPECT_EQ(m.source_dir, std::filesystem::canonical(testing::tiny_model_dir()).string());
  EXPECT_EQ(report->raw_bytes_written, m.total_raw_bytes());
  // Raw bytes: every file's bytes once (tensors + header + the other files).
  uint64_t dir_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(testing::tiny_model_dir())) dir_bytes += e.file_size();
  EXPECT_EQ(m.total_raw_bytes(), dir_bytes);
  ASSERT_EQ(m.hf_files.size(), 1u);
  EXPECT_EQ(m.hf_files[0].name, "model.safetensors");
  EXPECT_EQ(m.hf_files[0].tensors.size(), testing::tensor_names(testing::tiny_model_dir() + "/model.safetensors").size());
  const ShardEntry* expert = m.find_expert(2, 5);
  ASSERT_NE(expert, nullptr);
  ASSERT_EQ(expert->tensors.size(), 3u);
  EXPECT_EQ(expert->tensors[0].name, testing::mixtral_expert_tensor(2, 5, "w1"));
  EXPECT_EQ(expert->element_bytes, 2);
  // Per-codec report: the shards each codec was chosen for add up to those written.
  int chosen = 0;
  std::printf("[ info ] convert: %d shards, raw %llu bytes, stored %llu bytes\n", report->shards_written,
              static_cast<unsigned long long>(report->raw_bytes_written),
              static_cast<unsigned long long>(report->stored_bytes_written));
  for (const auto& c : report->codecs) {
    chosen += c.shards;
    std::printf("[ info ]   %s: tried on %llu raw bytes -> %llu, chosen for %d shards\n", codec_name(c.codec),
                static_cast<unsigned long long>(c.raw_bytes), static_cast<unsigned long long>(c.stored_bytes), c.shards);
  }
  EXPECT_EQ(chosen, report->shards_written);

  // Content hashes as xxhsum computes them; a zstd shard's payload decodes with the zstd CLI.
  for (const char* name : {"config.json", "tokenizer.model", "README.md"}) {
    const ShardEntry* f = m.find_file(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->hash.hex(), xxhsum(testing::tiny_model_dir() + "/" + name)) << name;
    EXPECT_TRUE(std::filesystem::exists(store_shard_path(store, f->hash))) << name;
    if (f->codec == Codec::kZstd) {
      const std::string out = tmp.file(std::string(name) + ".dec");
      auto r = testing::run_command("tail -c +49 '" + store_shard_path(store, f->hash) + "' | zstd -d -q -o '" + out + "'");
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(testing::read_file(out), testing::read_file(testing::tiny_model_dir() + "/" + name)) << name;
    }
  }

  const std::string out = tmp.file("export");
  ASSERT_TRUE(export_hf(store, 0, out, nullptr).ok());
  EXPECT_EQ(testing::tree_diff(testing::tiny_model_dir(), out), "");
  EXPECT_EQ(testing::cmp_trees(testing::tiny_model_dir(), out), "");
}

TEST(StoreWriter, ShardedModelWithIndexRoundTrips) {
  ScopedTempDir tmp("store_sharded");
  const std::string model = tmp.file("model");
  testing::copy_tree(testing::sharded_model_dir(), model);
  std::filesystem::create_directories(model + "/extra/deeper");
  testing::write_file(model + "/extra/deeper/notes.txt", "nested file\n");
  testing::write_file(model + "/empty.txt", "");
  // Same bytes as config.json: stored once.
  std::filesystem::copy_file(model + "/config.json", model + "/extra/config_copy.json");
  const std::string store = tmp.file("store");
  SaveOptions o = options_new();
  o.codec = "zstd-planes";
  o.threads = 3;
  auto report = save_to_store(model, store, o);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  const Manifest m = load(store, 1);
  EXPECT_EQ(m.hf_files.size(), 2u);
  std::set<Hash128> unique;
  for (const auto& s : m.shards) unique.insert(s.hash);
  EXPECT_EQ(unique.size() + 1, m.shards.size());
  EXPECT_EQ(report->shards_written, static_cast<int>(unique.size()));
  EXPECT_EQ(report->shards_skipped, 1);
  EXPECT_EQ(testing::count_files(store + "/shards"), static_cast<int>(unique.size()));
  EXPECT_EQ(m.find_file("extra/config_copy.json")->hash, m.find_file("config.json")->hash);
  ASSERT_NE(m.find_file("extra/deeper/notes.txt"), nullptr);
  ASSERT_NE(m.find_file("model.safetensors.index.json"), nullptr);
  for (const auto& s : m.shards) {
    if (s.kind != ShardKind::kFile) {
      EXPECT_EQ(s.codec, Codec::kZstdPlanes) << s.id;
    }
  }
  const std::string out = tmp.file("export");
  ASSERT_TRUE(export_hf(store, 1, out, nullptr).ok());
  EXPECT_EQ(testing::tree_diff(model, out), "");
  EXPECT_EQ(testing::cmp_trees(model, out), "");
}

TEST(StoreWriter, ForcedRawCodecAndThreadsGiveTheSameHashes) {
  ScopedTempDir tmp("store_raw");
  SaveOptions a = options_new();
  a.codec = "raw";
  SaveOptions b = options_new();
  b.threads = 4;
  ASSERT_TRUE(save_to_store(testing::tiny_model_dir(), tmp.file("a"), a).ok());
  ASSERT_TRUE(save_to_store(testing::tiny_model_dir(), tmp.file("b"), b).ok());
  const Manifest ma = load(tmp.file("a"), 1);
  const Manifest mb = load(tmp.file("b"), 1);
  ASSERT_EQ(ma.shards.size(), mb.shards.size());
  for (size_t i = 0; i < ma.shards.size(); ++i) {
    EXPECT_EQ(ma.shards[i].id, mb.shards[i].id);
    EXPECT_EQ(ma.shards[i].hash, mb.shards[i].hash) << ma.shards[i].id;
    EXPECT_EQ(ma.shards[i].codec, Codec::kRaw);
    EXPECT_EQ(ma.shards[i].stored_bytes, ma.shards[i].raw_bytes);
  }
  EXPECT_EQ(ma.fingerprint, mb.fingerprint);
  // A skipped shard is listed as it is stored (raw here), whatever this save would choose.
  const std::string changed = tmp.file("changed");
  testing::copy_tree(testing::tiny_model_dir(), changed);
  testing::bump_tensor_bytes(changed + "/model.safetensors", testing::mixtral_expert_tensor(1, 2, "w1"));
  auto again = save_to_store(changed, tmp.file("a"), {});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->shards_written, 1);
  for (const auto& s : load(tmp.file("a"), 2).shards) {
    if (s.id == "layer.1.expert.2") continue;  // written by this save, codec auto
    EXPECT_EQ(s.codec, Codec::kRaw) << s.id;
    EXPECT_EQ(s.stored_bytes, s.raw_bytes) << s.id;
  }
  ASSERT_TRUE(export_hf(tmp.file("a"), 0, tmp.file("out"), nullptr).ok());
  EXPECT_EQ(testing::cmp_trees(changed, tmp.file("out")), "");
}

TEST(StoreWriter, IncrementalSaveWritesOnlyTheChangedExpert) {
  ScopedTempDir tmp("store_incr");
  const std::string original = tmp.file("original");
  const std::string model = tmp.file("model");
  testing::copy_tree(testing::tiny_model_dir(), original);
  testing::copy_tree(testing::tiny_model_dir(), model);
  const std::string store = tmp.file("store");
  auto first = save_to_store(model, store, options_new());
  ASSERT_TRUE(first.ok()) << first.status().to_string();

  // Saving the same directory again writes nothing and makes no version.
  auto same = save_to_store(model, store, {});
  ASSERT_TRUE(same.ok()) << same.status().to_string();
  EXPECT_TRUE(same->unchanged);
  EXPECT_EQ(same->version, 1);
  EXPECT_EQ(same->shards_written, 0);
  EXPECT_FALSE(std::filesystem::exists(store + "/MANIFEST-000002"));

  testing::bump_tensor_bytes(model + "/model.safetensors", testing::mixtral_expert_tensor(2, 5, "w2"));
  ASSERT_NE(testing::read_file(model + "/model.safetensors"), testing::read_file(original + "/model.safetensors"));
  auto second = save_to_store(model, store, {});
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  std::printf("[ info ] incremental save: %d written (raw %llu, stored %llu bytes), %d skipped (raw %llu bytes)\n",
              second->shards_written, static_cast<unsigned long long>(second->raw_bytes_written),
              static_cast<unsigned long long>(second->stored_bytes_written), second->shards_skipped,
              static_cast<unsigned long long>(second->raw_bytes_skipped));
  EXPECT_FALSE(second->unchanged);
  EXPECT_EQ(second->version, 2);
  EXPECT_EQ(second->shards_written, 1);
  EXPECT_EQ(second->shards_skipped, first->shards_written - 1);
  const Manifest m1 = load(store, 1);
  const Manifest m3 = load(store, 2);
  EXPECT_EQ(m3.parent_version, 1);
  EXPECT_EQ(second->raw_bytes_written, m3.find_expert(2, 5)->raw_bytes);
  std::vector<std::string> changed;
  for (const auto& s : m3.shards) {
    if (!(m1.find_shard(s.id)->hash == s.hash)) changed.push_back(s.id);
  }
  EXPECT_EQ(changed, std::vector<std::string>{"layer.2.expert.5"});

  ASSERT_TRUE(export_hf(store, 2, tmp.file("out3"), nullptr).ok());
  EXPECT_EQ(testing::cmp_trees(model, tmp.file("out3")), "");
  EXPECT_EQ(testing::tree_diff(model, tmp.file("out3")), "");
  ASSERT_TRUE(export_hf(store, 1, tmp.file("out1"), nullptr).ok());
  EXPECT_EQ(testing::cmp_trees(original, tmp.file("out1")), "");
  EXPECT_EQ(testing::tree_diff(original, tmp.file("out1")), "");
}

TEST(StoreWriter, AnotherModelIsRefusedAndNothingChanges) {
  ScopedTempDir tmp("store_other");
  const std::string store = tmp.file("store");
  ASSERT_TRUE(save_to_store(testing::tiny_model_dir(), store, options_new()).ok());
  const auto before = testing::tree_files(store);
  auto other = save_to_store(testing::sharded_model_dir(), store, {});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  const std::string msg = other.status().message();
  EXPECT_CONTAINS(msg, "fingerprint");
  EXPECT_CONTAINS(msg, store);
  EXPECT_CONTAINS(msg, load(store, 1).fingerprint.hex());
  EXPECT_CONTAINS(msg, testing::sharded_model_dir());
  EXPECT_EQ(testing::tree_files(store), before);
}

TEST(StoreWriter, ConvertRefusesAStoreWithAVersion) {
  ScopedTempDir tmp("store_new");
  const std::string store = tmp.file("store");
  ASSERT_TRUE(save_to_store(testing::tiny_model_dir(), store, options_new()).ok());
  const auto before = testing::tree_files(store);
  auto again = save_to_store(testing::tiny_model_dir(), store, options_new());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(again.status().message(), "version 1");
  EXPECT_EQ(testing::tree_files(store), before);
}

TEST(StoreWriter, ForeignNonEmptyDirectoryIsRefused) {
  ScopedTempDir tmp("store_foreign");
  testing::write_file(tmp.file("precious.txt"), "user data");
  auto r = save_to_store(testing::tiny_model_dir(), tmp.path(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(r.status().message(), "precious.txt");
  EXPECT_EQ(testing::count_files(tmp.path()), 1);
}

TEST(StoreWriter, UnwritableStoreDirectoryIsInternalNamingThePath) {
  ScopedTempDir tmp("store_unwritable");
  testing::write_file(tmp.file("plain_file"), "x");
  const std::string store = tmp.file("plain_file") + "/store";
  auto r = save_to_store(testing::tiny_model_dir(), store, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().to_string();
  EXPECT_CONTAINS(r.status().message(), tmp.file("plain_file"));
}

TEST(StoreWriter, BadModelDirectoriesAreRefusedBeforeTheStoreIsTouched) {
  ScopedTempDir tmp("store_badmodel");
  const std::string store = tmp.file("store");
  auto missing = save_to_store(tmp.file("no_such_model"), store, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), tmp.file("no_such_model"));

  // A safetensors file with a hole between its tensors, and one with bytes after them.
  const std::string config = testing::read_file(testing::tiny_model_dir() + "/config.json");
  const nlohmann::json hole = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                               {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {16, 24}}}}};
  const nlohmann::json tail = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
  for (const auto& [tag, header, data_size] :
       std::vector<std::tuple<std::string, nlohmann::json, size_t>>{{"hole", hole, 24}, {"tail", tail, 16}}) {
    const std::string dir = tmp.file(tag);
    std::filesystem::create_directories(dir);
    testing::write_file(dir + "/config.json", config);
    testing::write_file(dir + "/model.safetensors", testing::serialize_safetensors_raw(header, std::string(data_size, '\1')));
    auto r = save_to_store(dir, store, {});
    ASSERT_FALSE(r.ok()) << tag;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
    EXPECT_CONTAINS(r.status().message(), dir + "/model.safetensors");
  }
  auto bad_codec = [&] {
    SaveOptions o;
    o.codec = "lz4";
    return save_to_store(testing::tiny_model_dir(), store, o);
  }();
  EXPECT_EQ(bad_codec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(bad_codec.status().message(), "lz4");
  EXPECT_FALSE(std::filesystem::exists(store));
}

TEST(StoreWriter, AShardFileWithABadHeaderIsWrittenAgain) {
  ScopedTempDir tmp("store_heal");
  const std::string store = tmp.file("store");
  ASSERT_TRUE(save_to_store(testing::tiny_model_dir(), store, options_new()).ok());
  const std::string path = store_shard_path(store, load(store, 1).find_expert(1, 1)->hash);
  std::string bytes = testing::read_file(path);
  bytes[0] = 'X';  // bad magic
  testing::write_file(path, bytes);
  auto again = save_to_store(testing::tiny_model_dir(), store, {});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->shards_written, 1);
  ASSERT_TRUE(export_hf(store, 1, tmp.file("out"), nullptr).ok());
  EXPECT_EQ(testing::cmp_trees(testing::tiny_model_dir(), tmp.file("out")), "");
}

TEST(StoreWriter, BadOptionsAndStoresAreRefused) {
  ScopedTempDir tmp("store_badopts");
  SaveOptions zero;
  zero.threads = 0;
  auto r = save_to_store(testing::tiny_model_dir(), tmp.file("s"), zero);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(r.status().message(), "threads");

  testing::write_file(tmp.file("file_store"), "x");
  r = save_to_store(testing::tiny_model_dir(), tmp.file("file_store"), {});
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(r.status().message(), tmp.file("file_store"));

  // CURRENT that names no manifest: DataLoss naming CURRENT, nothing written.
  const std::string store = tmp.file("store");
  ASSERT_TRUE(save_to_store(testing::tiny_model_dir(), store, {}).ok());
  testing::write_file(store_current_path(store), "garbage\n");
  r = save_to_store(testing::tiny_model_dir(), store, {});
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(r.status().message(), store_current_path(store));
  // CURRENT naming a manifest that is gone.
  testing::write_file(store_current_path(store), "MANIFEST-000007\n");
  r = save_to_store(testing::tiny_model_dir(), store, {});
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(r.status().message(), "MANIFEST-000007");
  EXPECT_FALSE(std::filesystem::exists(store_manifest_path(store, 8)));
}

TEST(StoreWriter, ATensorInTwoFilesIsDataLoss) {
  ScopedTempDir tmp("store_dup_tensor");
  const std::string dir = tmp.file("model");
  std::filesystem::create_directories(dir);
  testing::write_file(dir + "/config.json", testing::read_file(testing::tiny_model_dir() + "/config.json"));
  const std::vector<testing::StTensor> a = {{"x", "F32", {2}, std::string(8, '\1')}};
  const std::vector<testing::StTensor> b = {{"x", "F32", {2}, std::string(8, '\2')}, {"y", "F32", {1}, std::string(4, '\3')}};
  testing::write_file(dir + "/a.safetensors", testing::serialize_safetensors(a));
  testing::write_file(dir + "/b.safetensors", testing::serialize_safetensors(b));
  testing::write_json(dir + "/model.safetensors.index.json",
                      {{"metadata", nlohmann::json::object()}, {"weight_map", {{"x", "a.safetensors"}, {"y", "b.safetensors"}}}});
  auto r = save_to_store(dir, tmp.file("store"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
  EXPECT_CONTAINS(r.status().message(), "'x'");
  EXPECT_CONTAINS(r.status().message(), dir + "/a.safetensors");
  EXPECT_CONTAINS(r.status().message(), dir + "/b.safetensors");
}

}  // namespace
}  // namespace moe
