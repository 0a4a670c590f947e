// verify_store lists each bad shard (flipped, truncated, missing) with its layer and
// expert; gc_store keeps the newest versions and removes what nothing references;
// export_hf refuses a non-empty target and a corrupt shard.
#include "moe/store/store_maintenance.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "contains_util.h"
#include "moe/store/manifest.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_lock.h"
#include "moe/store/store_writer.h"
#include "safetensors_util.h"
#include "store/store_test_util.h"
#include "test_util.h"

namespace moe {
namespace {

using ::moe::testing::ShmTempDir;

Manifest load(const std::string& store, int64_t version) {
  auto parsed = parse_manifest(testing::read_file(store_manifest_path(store, version)), "test");
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  return parsed.ok() ? *parsed : Manifest{};
}

class StoreMaintenance : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(save_to_store(testing::tiny_model_dir(), store_, {}).ok());
    manifest_ = load(store_, 1);
  }
  std::string expert_path(int layer, int expert) const {
    return store_shard_path(store_, manifest_.find_expert(layer, expert)->hash);
  }
  void expect_one_bad(int layer, int expert, const std::string& problem) {
    auto report = verify_store(store_, 0, 3, nullptr);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    EXPECT_EQ(report->shards_checked, static_cast<int>(manifest_.shards.size()));
    EXPECT_EQ(report->raw_bytes, manifest_.total_raw_bytes());
    ASSERT_EQ(report->bad.size(), 1u);
    const BadShard& bad = report->bad[0];
    EXPECT_EQ(bad.id, "layer." + std::to_string(layer) + ".expert." + std::to_string(expert));
    EXPECT_CONTAINS(bad.description, "layer " + std::to_string(layer));
    EXPECT_CONTAINS(bad.description, "expert " + std::to_string(expert));
    EXPECT_EQ(bad.path, expert_path(layer, expert));
    EXPECT_CONTAINS(bad.problem, problem);
  }
  ShmTempDir tmp_{"store_maint"};
  std::string store_ = tmp_.file("store");
  Manifest manifest_;
};

TEST_F(StoreMaintenance, CleanStoreVerifies) {
  uint64_t done = 0, total = 0;
  auto report = verify_store(store_, 1, 2, [&](const std::string&, uint64_t d, uint64_t t) {
    done = d;
    total = t;
  });
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_TRUE(report->bad.empty());
  EXPECT_EQ(report->version, 1);
  EXPECT_EQ(done, total);
  EXPECT_GT(total, 0u);
}

TEST_F(StoreMaintenance, FlippedByteIsListedWithLayerAndExpert) {
  const std::string path = expert_path(1, 3);
  std::string bytes = testing::read_file(path);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x40);
  testing::write_file(path, bytes);
  expect_one_bad(1, 3, path);
  // Export refuses it, naming the shard.
  auto st = export_hf(store_, 0, tmp_.file("out"), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(st.message(), "layer 1");
  EXPECT_CONTAINS(st.message(), "expert 3");
}

TEST_F(StoreMaintenance, TruncatedShardIsListed) {
  const std::string path = expert_path(3, 7);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  expect_one_bad(3, 7, path);
}

TEST_F(StoreMaintenance, MissingShardIsListedAsMissing) {
  std::filesystem::remove(expert_path(0, 0));
  expect_one_bad(0, 0, "missing");
}

TEST_F(StoreMaintenance, VerifyOfNoStoreIsNotFound) {
  auto report = verify_store(tmp_.file("nothing"), 0, 1, nullptr);
  EXPECT_EQ(report.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(report.status().message(), tmp_.file("nothing"));
}

TEST_F(StoreMaintenance, ExportRefusesANonEmptyDirectory) {
  std::filesystem::create_directories(tmp_.file("out"));
  testing::write_file(tmp_.file("out/keep.txt"), "mine");
  auto st = export_hf(store_, 0, tmp_.file("out"), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(st.message(), tmp_.file("out"));
  EXPECT_EQ(testing::count_files(tmp_.file("out")), 1);
  // An existing empty directory is fine.
  std::filesystem::create_directories(tmp_.file("empty"));
  ASSERT_TRUE(export_hf(store_, 0, tmp_.file("empty"), nullptr).ok());
  EXPECT_EQ(testing::tree_diff(testing::tiny_model_dir(), tmp_.file("empty")), "");
}

TEST_F(StoreMaintenance, GcKeepsTheNewestVersionsAndRemovesUnreferencedShards) {
  // v1 = the tiny model; v2 changes expert (0, 2); v3 also changes expert (3, 4).
  const std::string model = tmp_.file("model");
  testing::copy_tree(testing::tiny_model_dir(), model);
  testing::bump_tensor_bytes(model + "/model.safetensors", testing::mixtral_expert_tensor(0, 2, "w1"));
  ASSERT_TRUE(save_to_store(model, store_, {}).ok());
  testing::bump_tensor_bytes(model + "/model.safetensors", testing::mixtral_expert_tensor(3, 4, "w1"));
  ASSERT_TRUE(save_to_store(model, store_, {}).ok());
  const std::string shards_dir = tmp_.file("store/shards");
  std::set<Hash128> all;
  for (int v = 1; v <= 3; ++v) {
    for (const auto& s : load(store_, v).shards) all.insert(s.hash);
  }
  EXPECT_EQ(testing::count_files(shards_dir), static_cast<int>(all.size()));
  testing::write_file(store_tmp_dir(store_) + "/leftover.tmp", "half a shard");

  auto zero = gc_store(store_, 0);
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(zero.status().message(), "0");

  // Keep 2: v1 goes, with the one shard only it used (expert (0, 2) before the change).
  auto two = gc_store(store_, 2);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(two->versions_removed, std::vector<int64_t>{1});
  EXPECT_EQ(two->shards_removed, 1);
  EXPECT_FALSE(std::filesystem::exists(store_manifest_path(store_, 1)));
  EXPECT_TRUE(std::filesystem::exists(store_manifest_path(store_, 2)));
  EXPECT_EQ(testing::count_files(store_tmp_dir(store_)), 0);

  auto one = gc_store(store_, 1);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(one->versions_removed, std::vector<int64_t>{2});
  EXPECT_EQ(one->shards_removed, 1);
  EXPECT_GT(one->bytes_removed, 0u);
  EXPECT_FALSE(std::filesystem::exists(store_manifest_path(store_, 2)));
  std::set<Hash128> live;
  for (const auto& s : load(store_, 3).shards) live.insert(s.hash);
  EXPECT_EQ(testing::count_files(shards_dir), static_cast<int>(live.size()));
  EXPECT_EQ(all.size() - live.size(), 2u);

  auto verify = verify_store(store_, 0, 2, nullptr);
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->bad.empty());
  EXPECT_EQ(verify->version, 3);
  ASSERT_TRUE(export_hf(store_, 0, tmp_.file("out"), nullptr).ok());
  EXPECT_EQ(testing::cmp_trees(model, tmp_.file("out")), "");
  // Nothing left to collect.
  auto again = gc_store(store_, 1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->versions_removed.empty());
  EXPECT_EQ(again->shards_removed, 0);
}

TEST_F(StoreMaintenance, GcRemovesAnUncommittedManifestButNeverTheCurrent) {
  // A manifest newer than CURRENT (a save that failed writing CURRENT) is garbage.
  std::filesystem::copy_file(store_manifest_path(store_, 1), store_manifest_path(store_, 2));
  auto report = gc_store(store_, 5);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->versions_removed, std::vector<int64_t>{2});
  EXPECT_EQ(report->shards_removed, 0);
  EXPECT_TRUE(std::filesystem::exists(store_manifest_path(store_, 1)));
  auto verify = verify_store(store_, 0, 1, nullptr);
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->bad.empty());
}

TEST_F(StoreMaintenance, GcRefusesWhenAKeptManifestIsUnreadable) {
  testing::write_file(store_manifest_path(store_, 1), "{ not json");
  const int before = testing::count_files(tmp_.file("store/shards"));
  auto report = gc_store(store_, 1);
  EXPECT_EQ(report.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(testing::count_files(tmp_.file("store/shards")), before);
}

TEST_F(StoreMaintenance, ErrorsForMissingStoresVersionsAndTargets) {
  auto gc = gc_store(tmp_.file("nothing"), 1);
  EXPECT_EQ(gc.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(gc.status().message(), tmp_.file("nothing"));
  auto v = verify_store(store_, 9, 1, nullptr);
  EXPECT_EQ(v.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(v.status().message(), "MANIFEST-000009");
  // A manifest file holding another version than its name says.
  std::filesystem::copy_file(store_manifest_path(store_, 1), store_manifest_path(store_, 4));
  v = verify_store(store_, 4, 1, nullptr);
  EXPECT_EQ(v.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(v.status().message(), "MANIFEST-000004");
  testing::write_file(tmp_.file("a_file"), "x");
  auto st = export_hf(store_, 0, tmp_.file("a_file"), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(st.message(), tmp_.file("a_file"));
}

TEST_F(StoreMaintenance, ExportRefusesAFileNameOutsideTheDirectory) {
  // A manifest whose file shard would be written to ../escaped.
  auto json = nlohmann::json::parse(testing::read_file(store_manifest_path(store_, 1)));
  for (auto& shard : json["shards"]) {
    if (shard["id"] == "file:README.md") shard["file_name"] = "../escaped.md";
  }
  testing::write_file(store_manifest_path(store_, 1), json.dump());
  auto st = export_hf(store_, 0, tmp_.file("out/inner"), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.to_string();
  EXPECT_CONTAINS(st.message(), "../escaped.md");
  EXPECT_FALSE(std::filesystem::exists(tmp_.file("out/escaped.md")));
}

}  // namespace
}  // namespace moe
