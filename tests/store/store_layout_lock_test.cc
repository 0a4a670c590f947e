// Store paths and the writer lock (flock on STORE/LOCK with the holder's pid).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "contains_util.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_lock.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::read_file;
using testing::ScopedTempDir;
using testing::write_file;

TEST(StoreLayoutTest, Paths) {
  EXPECT_EQ(store_current_path("/s"), "/s/CURRENT");
  EXPECT_EQ(store_lock_path("/s"), "/s/LOCK");
  EXPECT_EQ(store_tmp_dir("/s"), "/s/tmp");
  EXPECT_EQ(manifest_file_name(3), "MANIFEST-000003");
  EXPECT_EQ(manifest_file_name(1234567), "MANIFEST-1234567");
  EXPECT_EQ(store_manifest_path("/s", 12), "/s/MANIFEST-000012");
  Hash128 h{0xab01020304050607ULL, 0x08090a0b0c0d0e0fULL};
  EXPECT_EQ(store_shard_path("/s", h), "/s/shards/ab/ab0102030405060708090a0b0c0d0e0f.shard");
  for (int64_t v : {int64_t{0}, int64_t{3}, int64_t{999999}, int64_t{1234567}}) {
    auto p = parse_manifest_file_name(manifest_file_name(v));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, v);
  }
  for (std::string bad : {"MANIFEST-", "MANIFEST-12a", "manifest-000001", "CURRENT", "MANIFEST--1",
                          "MANIFEST-0000000000000000000001"}) {
    auto p = parse_manifest_file_name(bad);
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << bad;
    if (!p.ok()) {
      EXPECT_CONTAINS(p.status().message(), "'" + bad + "'");
    }
  }
}

TEST(StoreLayoutTest, IsStoreDir) {
  ScopedTempDir dir("layout");
  EXPECT_FALSE(is_store_dir(dir.path()));
  EXPECT_FALSE(is_store_dir(dir.file("missing")));
  write_file(store_current_path(dir.path()), "MANIFEST-000001\n");
  EXPECT_TRUE(is_store_dir(dir.path()));
}

TEST(StoreLockTest, SecondAcquireFailsNamingStoreAndPid) {
  ScopedTempDir dir("lock");
  {
    auto first = StoreLock::acquire(dir.path());
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(read_file(store_lock_path(dir.path())), std::to_string(::getpid()) + "\n");
    auto second = StoreLock::acquire(dir.path());
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_CONTAINS(second.status().message(), dir.path());
    EXPECT_CONTAINS(second.status().message(), "pid " + std::to_string(::getpid()));
    // Moving keeps it held.
    StoreLock moved = std::move(*first);
    EXPECT_FALSE(StoreLock::acquire(dir.path()).ok());
  }
  // Released on destruction.
  auto again = StoreLock::acquire(dir.path());
  EXPECT_TRUE(again.ok()) << again.status().to_string();
}

TEST(StoreLockTest, HeldByAnotherProcess) {
  ScopedTempDir dir("lock_fork");
  int to_parent[2], to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = StoreLock::acquire(dir.path());
    char ok = lock.ok() ? 'y' : 'n';
    (void)!::write(to_parent[1], &ok, 1);
    char done;
    (void)!::read(to_child[0], &done, 1);  // hold until the parent has looked
    ::_exit(0);
  }
  char ok = 0;
  ASSERT_EQ(::read(to_parent[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  auto mine = StoreLock::acquire(dir.path());
  EXPECT_EQ(mine.status().code(), StatusCode::kFailedPrecondition);
  if (!mine.ok()) {
    EXPECT_CONTAINS(mine.status().message(), "pid " + std::to_string(child));
  }
  char done = 'd';
  ASSERT_EQ(::write(to_child[1], &done, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
  // The child exited: the lock is free (the kernel released its flock).
  auto after = StoreLock::acquire(dir.path());
  EXPECT_TRUE(after.ok()) << after.status().to_string();
}

TEST(StoreLockTest, UncreatableLockIsInternal) {
  ScopedTempDir dir("lock_bad");
  write_file(dir.file("file"), "x");
  auto l = StoreLock::acquire(dir.file("file"));  // STORE is a regular file
  EXPECT_EQ(l.status().code(), StatusCode::kInternal);
  EXPECT_CONTAINS(l.status().message(), dir.file("file") + "/LOCK");
}

}  // namespace
}  // namespace moe
