// The disk tier of KV blocks (src/moe/kv/disk_tier.h): round trip, restart, content
// addressing, the LRU bound, full disks (FaultyStoreEnv), and every kind of bad file.
#include "moe/kv/disk_tier.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "log_capture.h"
#include "moe/store/faulty_store_env.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// A fresh directory on tmpfs when there is one (fsync is free there), removed with its
// contents.
class TempDir {
 public:
  explicit TempDir(const std::string& tag, const std::string& base = "") {
    std::string root = !base.empty() ? base : fs::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string templ = root + "/moe_test_kvdisk_" + tag + "_XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    char* dir = mkdtemp(buf.data());
    path_ = dir ? std::string(dir) : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// 2 layers x 2 KV heads x 4 tokens x (8 + 8) dims x bf16 = 512 bytes a block; its file:
// 96 (header) + 16 (token ids) + 512 = 624 bytes.
KvBlockLayout small_layout() {
  KvBlockLayout l;
  l.model_fingerprint = 0x1234abcd5678ef00ull;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 8;
  l.v_head_dim = 8;
  l.block_size = 4;
  l.dtype = 1;  // DType::kBF16
  return l;
}
constexpr uint64_t kBlockBytes = 512;
constexpr uint64_t kFileBytes = 624;
constexpr uint64_t kPayloadOffset = 96 + 16;

KvBlockHash hash_of(uint64_t n) { return KvBlockHash{n * 0x9E3779B97F4A7C15ull, n + 1}; }

std::vector<int32_t> tokens_of(int n, int block_size = 4) {
  std::vector<int32_t> t(static_cast<size_t>(block_size));
  std::iota(t.begin(), t.end(), 100 * n);
  return t;
}

std::vector<uint8_t> bytes_of(int n, uint64_t size = kBlockBytes) {
  std::vector<uint8_t> b(size);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 31 + n * 7 + 1);
  return b;
}

std::unique_ptr<KvDiskTier> open_tier(const std::string& dir, uint64_t max_bytes, StoreEnv* env = nullptr,
                                      const KvBlockLayout& layout = small_layout(), int64_t max_queued = 64) {
  KvDiskTierOptions o;
  o.dir = dir;
  o.max_bytes = max_bytes;
  o.env = env;
  o.max_queued_blocks = max_queued;
  auto tier = KvDiskTier::open(o, layout);
  EXPECT_TRUE(tier.ok()) << tier.status().to_string();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

std::string block_path(const std::string& dir, const KvBlockHash& h) { return dir + "/" + h.hex() + ".kvb"; }

std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Expected counters, field by field (so a failure names the field).
void expect_counters(const KvDiskTierCounters& c, const KvDiskTierCounters& want) {
  EXPECT_EQ(c.writes, want.writes);
  EXPECT_EQ(c.write_bytes, want.write_bytes);
  EXPECT_EQ(c.write_failures, want.write_failures);
  EXPECT_EQ(c.dropped, want.dropped);
  EXPECT_EQ(c.hits, want.hits);
  EXPECT_EQ(c.hit_bytes, want.hit_bytes);
  EXPECT_EQ(c.misses, want.misses);
  EXPECT_EQ(c.rejects, want.rejects);
  EXPECT_EQ(c.evictions, want.evictions);
  EXPECT_EQ(c.resident_blocks, want.resident_blocks);
  EXPECT_EQ(c.resident_bytes, want.resident_bytes);
}

KvDiskTierCounters counters(int64_t writes, int64_t hits, int64_t misses, int64_t rejects, int64_t evictions,
                            int64_t resident_blocks) {
  KvDiskTierCounters c;
  c.writes = writes;
  c.write_bytes = writes * static_cast<int64_t>(kFileBytes);
  c.hits = hits;
  c.hit_bytes = hits * static_cast<int64_t>(kBlockBytes);
  c.misses = misses;
  c.rejects = rejects;
  c.evictions = evictions;
  c.resident_blocks = resident_blocks;
  c.resident_bytes = resident_blocks * static_cast<int64_t>(kFileBytes);
  return c;
}

TEST(KvDiskTierTest, LayoutSizes) {
  EXPECT_EQ(small_layout().block_bytes(), kBlockBytes);
  EXPECT_EQ(small_layout().file_bytes(), kFileBytes);
  KvBlockLayout mla = small_layout();  // MLA's latent cache: one head, no V, f32
  mla.num_kv_heads = 1;
  mla.head_dim = 576;
  mla.v_head_dim = 0;
  mla.dtype = 0;
  EXPECT_EQ(mla.block_bytes(), 2u * 4 * 576 * 4);
}

TEST(KvDiskTierTest, RoundTrip) {
  TempDir dir("rt");
  auto tier = open_tier(dir.path(), 1 << 20);
  ASSERT_TRUE(tier);
  const auto h = hash_of(1);
  const auto bytes = bytes_of(1);
  tier->put(h, tokens_of(1), bytes);
  tier->flush();
  EXPECT_TRUE(tier->contains(h));
  EXPECT_FALSE(tier->contains(hash_of(2)));
  EXPECT_EQ(dir_names(dir.path()), std::vector<std::string>{h.hex() + ".kvb"});
  EXPECT_EQ(fs::file_size(block_path(dir.path(), h)), kFileBytes);

  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_TRUE(tier->get(h, tokens_of(1), out));
  EXPECT_EQ(out, bytes);
  EXPECT_FALSE(tier->get(hash_of(2), tokens_of(2), out));  // never put
  expect_counters(tier->counters(), counters(1, 1, 1, 0, 0, 1));
}

TEST(KvDiskTierTest, RoundTripWithoutSync) {
  TempDir dir("nosync");
  KvDiskTierOptions o;
  o.dir = dir.path();
  o.max_bytes = 1 << 20;
  o.sync = false;
  auto tier = KvDiskTier::open(o, small_layout());
  ASSERT_TRUE(tier.ok()) << tier.status().to_string();
  for (int i = 1; i <= 3; ++i) tier.value()->put(hash_of(i), tokens_of(i), bytes_of(i));  // the 3rd reuses a buffer
  tier.value()->flush();
  tier.value()->put(hash_of(4), tokens_of(4), bytes_of(4));
  tier.value()->flush();
  std::vector<uint8_t> out(kBlockBytes);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_TRUE(tier.value()->get(hash_of(i), tokens_of(i), out)) << i;
    EXPECT_EQ(out, bytes_of(i)) << i;
  }
  expect_counters(tier.value()->counters(), counters(4, 4, 0, 0, 0, 4));
}

TEST(KvDiskTierTest, SurvivesReopen) {
  TempDir dir("reopen");
  {
    auto tier = open_tier(dir.path(), 1 << 20);
    ASSERT_TRUE(tier);
    tier->put(hash_of(1), tokens_of(1), bytes_of(1));
    tier->flush();
    tier->put(hash_of(2), tokens_of(2), bytes_of(2));  // no flush: the destructor writes it
  }
  auto tier = open_tier(dir.path(), 1 << 20);
  ASSERT_TRUE(tier);
  EXPECT_TRUE(tier->contains(hash_of(1)));
  EXPECT_TRUE(tier->contains(hash_of(2)));
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_TRUE(tier->get(hash_of(1), tokens_of(1), out));
  EXPECT_EQ(out, bytes_of(1));
  EXPECT_TRUE(tier->get(hash_of(2), tokens_of(2), out));
  EXPECT_EQ(out, bytes_of(2));
  expect_counters(tier->counters(), counters(0, 2, 0, 0, 0, 2));
}

TEST(KvDiskTierTest, ContentAddressedNoRewrite) {
  TempDir dir("noreWrite");
  auto tier = open_tier(dir.path(), 1 << 20);
  ASSERT_TRUE(tier);
  const auto h = hash_of(1);
  tier->put(h, tokens_of(1), bytes_of(1));
  tier->put(h, tokens_of(1), bytes_of(9));  // still queued (or written): not queued again
  tier->flush();
  struct stat before {};
  ASSERT_EQ(::stat(block_path(dir.path(), h).c_str(), &before), 0);
  tier->put(h, tokens_of(1), bytes_of(9));  // indexed: not rewritten
  tier->flush();
  struct stat after {};
  ASSERT_EQ(::stat(block_path(dir.path(), h).c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_TRUE(tier->get(h, tokens_of(1), out));
  EXPECT_EQ(out, bytes_of(1));
  expect_counters(tier->counters(), counters(1, 1, 0, 0, 0, 1));
}

TEST(KvDiskTierTest, BoundedByMaxBytesLeastRecentlyUsedEvicted) {
  TempDir dir("lru");
  // 2.5 files' worth: two files fit, a third evicts the least recently used.
  auto tier = open_tier(dir.path(), kFileBytes * 5 / 2);
  ASSERT_TRUE(tier);
  std::vector<uint8_t> out(kBlockBytes);
  tier->put(hash_of(1), tokens_of(1), bytes_of(1));
  tier->put(hash_of(2), tokens_of(2), bytes_of(2));
  tier->flush();
  EXPECT_TRUE(tier->get(hash_of(1), tokens_of(1), out));  // 1 is now more recent than 2
  tier->put(hash_of(3), tokens_of(3), bytes_of(3));
  tier->flush();
  EXPECT_TRUE(tier->contains(hash_of(1)));
  EXPECT_FALSE(tier->contains(hash_of(2)));
  EXPECT_TRUE(tier->contains(hash_of(3)));
  EXPECT_FALSE(fs::exists(block_path(dir.path(), hash_of(2))));
  EXPECT_EQ(dir_names(dir.path()).size(), 2u);
  expect_counters(tier->counters(), counters(3, 1, 0, 0, 1, 2));

  tier->put(hash_of(1), tokens_of(1), bytes_of(1));  // present: counts as a use of 1
  tier->put(hash_of(4), tokens_of(4), bytes_of(4));  // evicts 3
  tier->flush();
  EXPECT_TRUE(tier->contains(hash_of(1)));
  EXPECT_FALSE(tier->contains(hash_of(3)));
  EXPECT_TRUE(tier->contains(hash_of(4)));
  EXPECT_FALSE(tier->get(hash_of(3), tokens_of(3), out));
  expect_counters(tier->counters(), counters(4, 1, 1, 0, 2, 2));
  tier.reset();

  // Reopened with room for one file: one of the two is evicted at open.
  auto smaller = open_tier(dir.path(), kFileBytes * 3 / 2);
  ASSERT_TRUE(smaller);
  expect_counters(smaller->counters(), counters(0, 0, 0, 0, 1, 1));
  EXPECT_EQ(dir_names(dir.path()).size(), 1u);
}

TEST(KvDiskTierTest, FullDiskFailsTheWriteAndLeavesNoFile) {
  TempDir dir("full");
  // The header (96 bytes) fits, the token ids cross the limit: a torn temp file.
  FaultyStoreEnv env(default_store_env(), {100, false});
  testing::LogCapture log;
  auto tier = open_tier(dir.path(), 1 << 20, &env);
  ASSERT_TRUE(tier);
  tier->put(hash_of(1), tokens_of(1), bytes_of(1));
  tier->flush();
  tier->put(hash_of(2), tokens_of(2), bytes_of(2));
  tier->flush();
  EXPECT_FALSE(tier->contains(hash_of(1)));
  EXPECT_TRUE(dir_names(dir.path()).empty());  // neither a block file nor a temp file
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_FALSE(tier->get(hash_of(1), tokens_of(1), out));
  KvDiskTierCounters want = counters(0, 0, 1, 0, 0, 0);
  want.write_failures = 2;
  expect_counters(tier->counters(), want);
  // Logged once for the run of failures, naming the reason.
  const std::string text = log.text();
  EXPECT_NE(text.find("No space left on device"), std::string::npos) << text;
  EXPECT_EQ(text.find("cannot write block"), text.rfind("cannot write block")) << text;
}

TEST(KvDiskTierTest, FailedRenameLeavesNoFile) {
  TempDir dir("rename");
  FaultyStoreEnv env(default_store_env(), {-1, true});
  auto tier = open_tier(dir.path(), 1 << 20, &env);
  ASSERT_TRUE(tier);
  tier->put(hash_of(1), tokens_of(1), bytes_of(1));
  tier->flush();
  EXPECT_FALSE(tier->contains(hash_of(1)));
  EXPECT_TRUE(dir_names(dir.path()).empty());
  KvDiskTierCounters want = counters(0, 0, 0, 0, 0, 0);
  want.write_failures = 1;
  expect_counters(tier->counters(), want);
}

TEST(KvDiskTierTest, UnwritableDirectoryIsFailedPrecondition) {
  TempDir dir("unwritable");
  // A path under a regular file cannot be created, even by root.
  const std::string file = dir.file("plain_file");
  std::ofstream(file) << "x";
  KvDiskTierOptions o;
  o.dir = file + "/sub";
  o.max_bytes = 1 << 20;
  auto tier = KvDiskTier::open(o, small_layout());
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(tier.status().message().find(o.dir), std::string::npos) << tier.status().message();
}

TEST(KvDiskTierTest, BadLayoutOrOptionsAreInvalidArgument) {
  TempDir dir("badlayout");
  KvDiskTierOptions o;
  o.dir = dir.path();
  o.max_bytes = 1 << 20;
  KvBlockLayout l = small_layout();
  l.dtype = 77;
  EXPECT_EQ(KvDiskTier::open(o, l).status().code(), StatusCode::kInvalidArgument);
  l = small_layout();
  l.block_size = 0;
  EXPECT_EQ(KvDiskTier::open(o, l).status().code(), StatusCode::kInvalidArgument);
  o.max_bytes = 0;
  EXPECT_EQ(KvDiskTier::open(o, small_layout()).status().code(), StatusCode::kInvalidArgument);
}

// Writes block 1 and returns its path.
std::string write_one(KvDiskTier& tier, const std::string& dir) {
  tier.put(hash_of(1), tokens_of(1), bytes_of(1));
  tier.flush();
  return block_path(dir, hash_of(1));
}

TEST(KvDiskTierTest, CorruptPayloadByteIsRejectedAndDeleted) {
  TempDir dir("corrupt");
  auto tier = open_tier(dir.path(), 1 << 20);
  ASSERT_TRUE(tier);
  const std::string path = write_one(*tier, dir.path());
  flip_byte(path, kPayloadOffset + 10);
  testing::LogCapture log;
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_FALSE(tier->get(hash_of(1), tokens_of(1), out));
  EXPECT_FALSE(tier->contains(hash_of(1)));
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(tier->get(hash_of(1), tokens_of(1), out));  // now a plain miss, not logged again
  expect_counters(tier->counters(), counters(1, 0, 1, 1, 0, 0));
  const std::string text = log.text();
  EXPECT_NE(text.find("payload checksum mismatch"), std::string::npos) << text;
  EXPECT_EQ(text.find("rejected"), text.rfind("rejected")) << text;
}

TEST(KvDiskTierTest, CorruptHeaderIsRejectedAndDeleted) {
  TempDir dir("corrupt_header");
  auto tier = open_tier(dir.path(), 1 << 20);
  ASSERT_TRUE(tier);
  const std::string path = write_one(*tier, dir.path());
  flip_byte(path, 20);  // inside the fingerprint: the header checksum catches it
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_FALSE(tier->get(hash_of(1), tokens_of(1), out));
  EXPECT_FALSE(fs::exists(path));
  expect_counters(tier->counters(), counters(1, 0, 0, 1, 0, 0));
}

TEST(KvDiskTierTest, TruncatedFileIsRejectedAndDeleted) {
  TempDir dir("truncated");
  auto tier = open_tier(dir.path(), 1 << 20);
  ASSERT_TRUE(tier);
  std::vector<uint8_t> out(kBlockBytes);
  // Payload cut short, then a header cut short.
  for (uint64_t size : {kFileBytes - 10, uint64_t{50}}) {
    const std::string path = write_one(*tier, dir.path());
    fs::resize_file(path, size);
    EXPECT_FALSE(tier->get(hash_of(1), tokens_of(1), out)) << size;
    EXPECT_FALSE(fs::exists(path)) << size;
  }
  expect_counters(tier->counters(), counters(2, 0, 0, 2, 0, 0));
}

TEST(KvDiskTierTest, TokenMismatchIsRejected) {
  TempDir dir("tokens");
  auto tier = open_tier(dir.path(), 1 << 20);
  ASSERT_TRUE(tier);
  const std::string path = write_one(*tier, dir.path());
  std::vector<int32_t> other = tokens_of(1);
  other[3] += 1;
  std::vector<uint8_t> out(kBlockBytes);
  EXPECT_FALSE(tier->get(hash_of(1), other, out));
  EXPECT_FALSE(tier->contains(hash_of(1)));
  EXPECT_FALSE(fs::exists(path));
  expect_counters(tier->counters(), counters(1, 0, 0, 1, 0, 0));
}

// A file written for another model or layout: rejected, left on disk, out of the index.
struct OtherLayoutCase {
  const char* name;
  KvBlockLayout layout;
};

class KvDiskTierOtherLayoutTest : public ::testing::TestWithParam<OtherLayoutCase> {};

TEST_P(KvDiskTierOtherLayoutTest, FileOfAnotherLayoutIsRejected) {
  TempDir dir("other");
  const KvBlockLayout mine = GetParam().layout;
  {
    auto writer = open_tier(dir.path(), 1 << 20);
    ASSERT_TRUE(writer);
    write_one(*writer, dir.path());
  }
  auto tier = open_tier(dir.path(), 1 << 20, nullptr, mine);
  ASSERT_TRUE(tier);
  EXPECT_TRUE(tier->contains(hash_of(1)));  // indexed by name; get() reads the header
  std::vector<uint8_t> out(mine.block_bytes());
  EXPECT_FALSE(tier->get(hash_of(1), tokens_of(1, mine.block_size), out));
  EXPECT_FALSE(tier->contains(hash_of(1)));
  EXPECT_TRUE(fs::exists(block_path(dir.path(), hash_of(1))));  // another tier's valid file
  KvDiskTierCounters c = tier->counters();
  EXPECT_EQ(c.rejects, 1);
  EXPECT_EQ(c.hits, 0);
  EXPECT_EQ(c.misses, 0);
  EXPECT_EQ(c.resident_blocks, 0);
  EXPECT_EQ(c.resident_bytes, 0);
}

KvBlockLayout with_fingerprint() {
  KvBlockLayout l = small_layout();
  l.model_fingerprint += 1;
  return l;
}
KvBlockLayout with_dtype() {
  KvBlockLayout l = small_layout();
  l.dtype = 0;  // f32
  return l;
}
KvBlockLayout with_block_size() {
  KvBlockLayout l = small_layout();
  l.block_size = 8;
  return l;
}

INSTANTIATE_TEST_SUITE_P(Layouts, KvDiskTierOtherLayoutTest,
                         ::testing::Values(OtherLayoutCase{"fingerprint", with_fingerprint()},
                                           OtherLayoutCase{"dtype", with_dtype()},
                                           OtherLayoutCase{"block_size", with_block_size()}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(KvDiskTierTest, NonBlockFilesAreLeftAloneAndStaleTempFilesRemoved) {
  TempDir dir("foreign");
  const std::string upper = std::string(32, 'A') + ".kvb";  // not lowercase hex
  std::ofstream(dir.file("notes.txt")) << "hello";
  std::ofstream(dir.file("abc.kvb")) << "short name";
  std::ofstream(dir.file(upper)) << "upper case";
  std::ofstream(dir.file(hash_of(7).hex() + ".kvb.tmp")) << "torn";
  auto tier = open_tier(dir.path(), 1 << 20);
  ASSERT_TRUE(tier);
  expect_counters(tier->counters(), counters(0, 0, 0, 0, 0, 0));
  write_one(*tier, dir.path());
  std::vector<std::string> want = {hash_of(1).hex() + ".kvb", upper, "abc.kvb", "notes.txt"};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(dir_names(dir.path()), want);
  expect_counters(tier->counters(), counters(1, 0, 0, 0, 0, 1));
}

// Holds the writer inside new_writable_file until released.
class GatedEnv final : public StoreEnv {
 public:
  explicit GatedEnv(StoreEnv& base) : base_(base) {}
  StatusOr<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) override {
    if (path.find(".kvb.tmp") != std::string::npos) {
      std::unique_lock<std::mutex> lock(mu_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    }
    return base_.new_writable_file(path);
  }
  Status rename_file(const std::string& from, const std::string& to) override { return base_.rename_file(from, to); }
  Status remove_file(const std::string& path) override { return base_.remove_file(path); }
  Status create_dirs(const std::string& path) override { return base_.create_dirs(path); }
  Status sync_dir(const std::string& path) override { return base_.sync_dir(path); }
  bool file_exists(const std::string& path) override { return base_.file_exists(path); }
  StatusOr<std::vector<std::string>> list_dir(const std::string& dir) override { return base_.list_dir(dir); }

  void wait_entered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }
  void open_gate() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  StoreEnv& base_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, open_ = false;
};

TEST(KvDiskTierTest, FullQueueDropsTheBlock) {
  TempDir dir("queue");
  GatedEnv env(default_store_env());
  auto tier = open_tier(dir.path(), 1 << 20, &env, small_layout(), /*max_queued=*/2);
  ASSERT_TRUE(tier);
  tier->put(hash_of(1), tokens_of(1), bytes_of(1));
  env.wait_entered();  // the writer holds block 1; the queue is empty
  tier->put(hash_of(2), tokens_of(2), bytes_of(2));
  tier->put(hash_of(3), tokens_of(3), bytes_of(3));
  tier->put(hash_of(4), tokens_of(4), bytes_of(4));  // queue full: dropped
  env.open_gate();
  tier->flush();
  EXPECT_TRUE(tier->contains(hash_of(3)));
  EXPECT_FALSE(tier->contains(hash_of(4)));
  KvDiskTierCounters want = counters(3, 0, 0, 0, 0, 3);
  want.dropped = 1;
  expect_counters(tier->counters(), want);
}

// The cost of a block's write (put to durable file, on the writer thread: copy, checksum,
// write, fsync, rename) and read (get: read + verify, page cache warm), for a 64 KiB and
// a 1 MiB block, on /tmp (with and without fsync) and /dev/shm. Not part of the suite: run with
//   disk_tier_test --gtest_also_run_disabled_tests --gtest_filter='*Cost*'
TEST(KvDiskTierBench, DISABLED_WriteReadCost) {
  KvBlockLayout l;
  l.model_fingerprint = 1;
  l.num_kv_heads = 8;
  l.head_dim = 128;
  l.v_head_dim = 128;
  l.block_size = 16;
  l.dtype = 1;  // bf16: 8 heads x 16 tokens x 256 dims x 2 bytes = 64 KiB a layer
  struct Where {
    std::string base;
    bool sync;
  };
  for (const Where& where : {Where{"/tmp", true}, Where{"/tmp", false}, Where{"/dev/shm", true}}) {
    const std::string& base = where.base;
    for (int32_t layers : {1, 16}) {
      l.num_layers = layers;
      const int n = layers == 1 ? 400 : 60;
      TempDir dir("bench", base);
      KvDiskTierOptions o;
      o.dir = dir.path();
      o.max_bytes = uint64_t{1} << 40;
      o.max_queued_blocks = n;
      o.sync = where.sync;
      auto opened = KvDiskTier::open(o, l);
      ASSERT_TRUE(opened.ok()) << opened.status().to_string();
      auto tier = std::move(opened).value();
      std::vector<uint8_t> bytes = bytes_of(0, l.block_bytes());
      std::vector<int32_t> tokens = tokens_of(0, l.block_size);
      using clock = std::chrono::steady_clock;
      auto t0 = clock::now();
      double put_s = 0;
      for (int i = 0; i < n; ++i) {
        auto p0 = clock::now();
        tier->put(hash_of(static_cast<uint64_t>(i)), tokens, bytes);
        put_s += std::chrono::duration<double>(clock::now() - p0).count();
      }
      tier->flush();
      const double write_s = std::chrono::duration<double>(clock::now() - t0).count();
      ASSERT_EQ(tier->counters().writes, n);
      std::vector<uint8_t> out(l.block_bytes());
      auto r0 = clock::now();
      for (int i = 0; i < n; ++i) ASSERT_TRUE(tier->get(hash_of(static_cast<uint64_t>(i)), tokens, out));
      const double read_s = std::chrono::duration<double>(clock::now() - r0).count();
      // put() again, now with the writer's spare buffers (8) to copy into.
      double reuse_s = 0;
      for (int i = 0; i < 8; ++i) {
        auto p0 = clock::now();
        tier->put(hash_of(static_cast<uint64_t>(n + i)), tokens, bytes);
        reuse_s += std::chrono::duration<double>(clock::now() - p0).count();
      }
      tier->flush();
      std::printf("%-8s sync %d block %7llu B: put() %7.1f us (reused buffer %6.1f us), write (to fsynced file) %8.1f us, get() %7.1f us"
                  " (%.2f GB/s) per block, %d blocks\n",
                  base.c_str(), where.sync ? 1 : 0, static_cast<unsigned long long>(l.block_bytes()), 1e6 * put_s / n, 1e6 * reuse_s / 8, 1e6 * write_s / n,
                  1e6 * read_s / n, static_cast<double>(l.block_bytes()) * n / read_s / 1e9, n);
    }
  }
}

}  // namespace
}  // namespace moe
