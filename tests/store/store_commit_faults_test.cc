// The commit protocol under faults: a save that runs out of disk after N bytes (for
// many N, including the bytes around the manifest and CURRENT writes), or whose renames
// fail, leaves the previous version current, verifying clean and exporting byte for
// byte; the next save succeeds. And STORE/LOCK: one save at a time.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "contains_util.h"
#include "moe/store/faulty_store_env.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_lock.h"
#include "moe/store/store_maintenance.h"
#include "moe/store/store_writer.h"
#include "safetensors_util.h"
#include "store/store_test_util.h"
#include "test_util.h"

namespace moe {
namespace {

using ::moe::testing::ShmTempDir;

// Adds 1 to every tensor byte of every safetensors file of `dir`: every tensor shard
// changes, the headers and other files do not.
void bump_every_tensor(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    for (const auto& name : testing::tensor_names(e.path().string())) testing::bump_tensor_bytes(e.path().string(), name);
  }
}

// The store still has `version` current, it verifies clean and exports to `model`.
void expect_intact(const std::string& store, int64_t version, const std::string& model, const std::string& scratch,
                   bool export_too) {
  EXPECT_EQ(testing::read_file(store_current_path(store)), manifest_file_name(version) + "\n");
  auto verify = verify_store(store, 0, 2, nullptr);
  ASSERT_TRUE(verify.ok()) << verify.status().to_string();
  EXPECT_EQ(verify->version, version);
  EXPECT_TRUE(verify->bad.empty()) << verify->bad[0].id << ": " << verify->bad[0].problem;
  if (export_too) {
    std::filesystem::remove_all(scratch);
    ASSERT_TRUE(export_hf(store, 0, scratch, nullptr).ok());
    EXPECT_EQ(testing::tree_diff(model, scratch), "");
  }
}

struct Sizes {
  int64_t total = 0;     // bytes a successful save appends
  int64_t manifest = 0;  // of them, the manifest's
  int64_t current = 0;   // and CURRENT's
};

// Measures a successful save of `model` into a copy of `store`.
Sizes measure_save(const std::string& model, const std::string& store, const std::string& scratch,
                   const SaveOptions& base) {
  std::filesystem::remove_all(scratch);
  if (std::filesystem::exists(store)) testing::copy_tree(store, scratch);
  FaultyStoreEnv env(default_store_env(), {});
  SaveOptions o = base;
  o.env = &env;
  auto r = save_to_store(model, scratch, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  Sizes s;
  s.total = env.bytes_appended();
  if (r.ok()) {
    s.manifest = static_cast<int64_t>(std::filesystem::file_size(store_manifest_path(scratch, r->version)));
    s.current = static_cast<int64_t>(std::filesystem::file_size(store_current_path(scratch)));
  }
  std::filesystem::remove_all(scratch);
  return s;
}

// fail_after_bytes values: every `step` bytes through the save, and the boundaries
// around the manifest and CURRENT writes (the last bytes appended, in that order).
std::vector<int64_t> fault_points(const Sizes& s, int64_t step) {
  std::vector<int64_t> points;
  for (int64_t n = 0; n < s.total; n += step) points.push_back(n);
  const int64_t shards_end = s.total - s.manifest - s.current;
  for (int64_t b : {shards_end - 1, shards_end, shards_end + 1, shards_end + s.manifest - 1, shards_end + s.manifest,
                    shards_end + s.manifest + 1, s.total - 1}) {
    if (b >= 0 && b < s.total) points.push_back(b);
  }
  return points;
}

void expect_disk_full(const StatusOr<SaveReport>& r, int64_t n) {
  ASSERT_FALSE(r.ok()) << "fail_after_bytes " << n << " did not fail the save";
  EXPECT_EQ(r.status().code(), StatusCode::kInternal) << n << ": " << r.status().to_string();
  EXPECT_CONTAINS(r.status().message(), "No space left on device");
  EXPECT_CONTAINS(r.status().message(), "/");  // names a file
}

TEST(StoreCommitFaults, DiskFullAtEveryPointKeepsThePreviousVersion) {
  ShmTempDir tmp("store_faults");
  const std::string model_a = tmp.file("a");
  const std::string model_b = tmp.file("b");
  testing::copy_tree(testing::sharded_model_dir(), model_a);
  testing::copy_tree(testing::sharded_model_dir(), model_b);
  bump_every_tensor(model_b);
  const std::string store = tmp.file("store");
  SaveOptions o;
  o.threads = 2;
  ASSERT_TRUE(save_to_store(model_a, store, o).ok());

  const Sizes sizes = measure_save(model_b, store, tmp.file("measure"), o);
  ASSERT_GT(sizes.manifest, 0);
  EXPECT_EQ(sizes.current, static_cast<int64_t>(std::string("MANIFEST-000002\n").size()));
  std::printf("[ info ] save of the changed sharded model appends %lld bytes (manifest %lld, CURRENT %lld)\n",
              static_cast<long long>(sizes.total), static_cast<long long>(sizes.manifest),
              static_cast<long long>(sizes.current));
  const auto points = fault_points(sizes, 4096);
  // Shards renamed into place before a failure stay (unreferenced until a later save
  // reuses them or gc removes them), so each point starts from the same store.
  const std::string pristine = tmp.file("pristine");
  testing::copy_tree(store, pristine);
  int i = 0;
  for (int64_t n : points) {
    std::filesystem::remove_all(store);
    testing::copy_tree(pristine, store);
    FaultyStoreEnv env(default_store_env(), {n, false});
    SaveOptions f = o;
    f.env = &env;
    expect_disk_full(save_to_store(model_b, store, f), n);
    EXPECT_EQ(testing::count_files(store_tmp_dir(store)), 0) << n;
    expect_intact(store, 1, model_a, tmp.file("out"), /*export_too=*/i++ % 8 == 0 || n >= sizes.total - sizes.manifest - sizes.current - 1);
    if (::testing::Test::HasFailure()) break;
  }
  // Exactly the full byte count is enough.
  FaultyStoreEnv exact(default_store_env(), {sizes.total, false});
  SaveOptions f = o;
  f.env = &exact;
  auto ok = save_to_store(model_b, store, f);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->version, 2);
  expect_intact(store, 2, model_b, tmp.file("out"), true);
  EXPECT_EQ(testing::count_files(store_tmp_dir(store)), 0);
  // And the old version still exports as it was.
  std::filesystem::remove_all(tmp.file("out"));
  ASSERT_TRUE(export_hf(store, 1, tmp.file("out"), nullptr).ok());
  EXPECT_EQ(testing::tree_diff(model_a, tmp.file("out")), "");
}

TEST(StoreCommitFaults, DiskFullDuringTheFirstSaveLeavesNoVersion) {
  ShmTempDir tmp("store_faults_first");
  const std::string store = tmp.file("store");
  SaveOptions o;  // fast zstd: every failing save re-encodes the whole model
  o.codec_options.level = 1;
  o.threads = 2;
  const Sizes sizes = measure_save(testing::tiny_model_dir(), store, tmp.file("measure"), o);
  std::printf("[ info ] first save of the tiny model appends %lld bytes (manifest %lld)\n",
              static_cast<long long>(sizes.total), static_cast<long long>(sizes.manifest));
  // Coarse steps through the shards (each failing save rewrites them), exact at the end.
  for (int64_t n : fault_points(sizes, std::max<int64_t>(4096, sizes.total / 16))) {
    std::filesystem::remove_all(store);
    FaultyStoreEnv env(default_store_env(), {n, false});
    SaveOptions f = o;
    f.env = &env;
    expect_disk_full(save_to_store(testing::tiny_model_dir(), store, f), n);
    EXPECT_FALSE(std::filesystem::exists(store_current_path(store))) << n;
    // No version is current: NotFound, or (a manifest was written, CURRENT was not)
    // DataLoss naming the missing CURRENT.
    auto verify = verify_store(store, 0, 1, nullptr);
    ASSERT_FALSE(verify.ok()) << n;
    EXPECT_CONTAINS(verify.status().message(), "CURRENT");
    if (::testing::Test::HasFailure()) break;
  }
  // The next save commits above any manifest the failed one left (never over it).
  const bool left_manifest = std::filesystem::exists(store_manifest_path(store, 1));
  auto ok = save_to_store(testing::tiny_model_dir(), store, {});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->version, left_manifest ? 2 : 1);
  expect_intact(store, ok->version, testing::tiny_model_dir(), tmp.file("out"), true);
}

TEST(StoreCommitFaults, FailingRenamesKeepThePreviousVersion) {
  ShmTempDir tmp("store_renames");
  const std::string model = tmp.file("model");
  testing::copy_tree(testing::tiny_model_dir(), model);
  const std::string store = tmp.file("store");
  ASSERT_TRUE(save_to_store(model, store, {}).ok());
  testing::bump_tensor_bytes(model + "/model.safetensors", testing::mixtral_expert_tensor(0, 1, "w3"));
  FaultyStoreEnv env(default_store_env(), {-1, true});
  SaveOptions f;
  f.env = &env;
  auto r = save_to_store(model, store, f);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().to_string();
  expect_intact(store, 1, testing::tiny_model_dir(), tmp.file("out"), true);
  EXPECT_EQ(testing::count_files(store_tmp_dir(store)), 0);
  auto ok = save_to_store(model, store, {});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->shards_written, 1);
  expect_intact(store, 2, model, tmp.file("out"), true);
}

TEST(StoreLockTest, SaveWhileTheLockIsHeldIsRefused) {
  ShmTempDir tmp("store_lock");
  const std::string store = tmp.file("store");
  ASSERT_TRUE(save_to_store(testing::tiny_model_dir(), store, {}).ok());
  {
    auto lock = StoreLock::acquire(store);
    ASSERT_TRUE(lock.ok()) << lock.status().to_string();
    auto r = save_to_store(testing::tiny_model_dir(), store, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_CONTAINS(r.status().message(), "LOCK");
    auto gc = gc_store(store, 1);
    EXPECT_EQ(gc.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(testing::read_file(store_current_path(store)), "MANIFEST-000001\n");
  }
  // The lock is free again (the model is unchanged, so no new version is made).
  auto after = save_to_store(testing::tiny_model_dir(), store, {});
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_TRUE(after->unchanged);
  EXPECT_EQ(after->version, 1);
}

TEST(StoreLockTest, ConcurrentSavesSerializeOrOneIsRefused) {
  ShmTempDir tmp("store_concurrent");
  const std::string store = tmp.file("store");
  for (int round = 0; round < 3; ++round) {
    StatusOr<SaveReport> r1 = internal_error("unset"), r2 = internal_error("unset");
    std::thread t1([&] { r1 = save_to_store(testing::tiny_model_dir(), store, {}); });
    std::thread t2([&] { r2 = save_to_store(testing::tiny_model_dir(), store, {}); });
    t1.join();
    t2.join();
    ASSERT_TRUE(r1.ok() || r2.ok()) << r1.status().to_string() << " / " << r2.status().to_string();
    for (const auto* r : {&r1, &r2}) {
      if (!r->ok()) {
        EXPECT_EQ(r->status().code(), StatusCode::kFailedPrecondition);
        EXPECT_CONTAINS(r->status().message(), "LOCK");
      }
    }
    if (r1.ok() && r2.ok()) {  // serialized: the second made a new version or found nothing changed
      EXPECT_TRUE(r1->version != r2->version || r1->unchanged || r2->unchanged);
    }
    expect_intact(store, std::max(r1.ok() ? r1->version : 0, r2.ok() ? r2->version : 0), testing::tiny_model_dir(),
                  tmp.file("out"), round == 2);
  }
}

}  // namespace
}  // namespace moe
