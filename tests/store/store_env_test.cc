// The POSIX StoreEnv and the full-disk FaultyStoreEnv, against the real file system.
#include "moe/store/store_env.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "contains_util.h"
#include "moe/store/faulty_store_env.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::read_file;
using testing::ScopedTempDir;
using testing::write_file;

Status write_whole(StoreEnv& env, const std::string& path, const std::string& data) {
  MOE_ASSIGN_OR_RETURN(auto f, env.new_writable_file(path));
  MOE_RETURN_IF_ERROR(f->append(data.data(), data.size()));
  MOE_RETURN_IF_ERROR(f->sync());
  return f->close();
}

TEST(StoreEnvTest, WriteSyncRenameRemoveList) {
  ScopedTempDir dir("store_env");
  StoreEnv& env = default_store_env();
  const std::string sub = dir.file("a/b/c");
  ASSERT_TRUE(env.create_dirs(sub).ok());
  ASSERT_TRUE(env.create_dirs(sub).ok());  // exists: fine
  EXPECT_TRUE(std::filesystem::is_directory(sub));

  const std::string big(3 * 1024 * 1024 + 5, 'x');
  ASSERT_TRUE(write_whole(env, sub + "/f.tmp", big).ok());
  EXPECT_EQ(read_file(sub + "/f.tmp"), big);
  // Truncates an existing file.
  ASSERT_TRUE(write_whole(env, sub + "/f.tmp", "short").ok());
  EXPECT_EQ(read_file(sub + "/f.tmp"), "short");

  {
    auto f = env.new_writable_file(sub + "/g");
    ASSERT_TRUE(f.ok());
    EXPECT_EQ((*f)->path(), sub + "/g");
    ASSERT_TRUE((*f)->append("ab", 2).ok());
    ASSERT_TRUE((*f)->append("cd", 2).ok());
    ASSERT_TRUE((*f)->close().ok());
    EXPECT_TRUE((*f)->close().ok());  // idempotent
    EXPECT_FALSE((*f)->append("e", 1).ok());
  }
  EXPECT_EQ(read_file(sub + "/g"), "abcd");

  ASSERT_TRUE(env.rename_file(sub + "/f.tmp", sub + "/g").ok());  // atomic replace
  EXPECT_EQ(read_file(sub + "/g"), "short");
  EXPECT_FALSE(env.file_exists(sub + "/f.tmp"));
  EXPECT_TRUE(env.file_exists(sub + "/g"));
  ASSERT_TRUE(env.sync_dir(sub).ok());

  write_file(sub + "/b", "");
  write_file(sub + "/a", "");
  auto names = env.list_dir(sub);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "g"}));

  ASSERT_TRUE(env.remove_file(sub + "/g").ok());
  EXPECT_FALSE(env.file_exists(sub + "/g"));
}

TEST(StoreEnvTest, ErrorsNameThePath) {
  ScopedTempDir dir("store_env_err");
  StoreEnv& env = default_store_env();
  write_file(dir.file("plain"), "x");
  // A path under a regular file cannot be created, even by root.
  const std::string under_file = dir.file("plain/x");
  auto f = env.new_writable_file(under_file);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInternal);
  EXPECT_CONTAINS(f.status().message(), under_file);
  EXPECT_CONTAINS(f.status().message(), "Not a directory");

  Status d = env.create_dirs(dir.file("plain/sub/dir"));
  EXPECT_EQ(d.code(), StatusCode::kInternal);
  EXPECT_CONTAINS(d.message(), dir.file("plain/sub/dir"));

  auto l = env.list_dir(dir.file("missing"));
  EXPECT_EQ(l.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(l.status().message(), dir.file("missing"));

  Status r = env.rename_file(dir.file("missing"), dir.file("other"));
  EXPECT_FALSE(r.ok());
  EXPECT_CONTAINS(r.message(), dir.file("missing"));
  EXPECT_CONTAINS(r.message(), "No such file");

  Status rm = env.remove_file(dir.file("missing"));
  EXPECT_FALSE(rm.ok());
  EXPECT_CONTAINS(rm.message(), dir.file("missing"));

  Status s = env.sync_dir(dir.file("missing"));
  EXPECT_FALSE(s.ok());
  EXPECT_CONTAINS(s.message(), dir.file("missing"));
}

TEST(StoreEnvTest, UnwritableDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions (the path-under-a-file case covers root)";
  ScopedTempDir dir("store_env_ro");
  std::filesystem::create_directory(dir.file("ro"));
  std::filesystem::permissions(dir.file("ro"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  auto f = default_store_env().new_writable_file(dir.file("ro/x"));
  std::filesystem::permissions(dir.file("ro"), std::filesystem::perms::owner_all);
  ASSERT_FALSE(f.ok());
  EXPECT_CONTAINS(f.status().message(), dir.file("ro/x"));
  EXPECT_CONTAINS(f.status().message(), "Permission denied");
}

TEST(FaultyStoreEnvTest, FailsLikeAFullDisk) {
  ScopedTempDir dir("faulty_env");
  FaultyStoreEnv env(default_store_env(), StoreFaultPlan{10, false});
  auto a = env.new_writable_file(dir.file("a"));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->append("123456", 6).ok());
  auto b = env.new_writable_file(dir.file("b"));
  ASSERT_TRUE(b.ok());
  // 6 + 6 > 10: the first 4 bytes fit and are written, then ENOSPC.
  Status s = (*b)->append("abcdef", 6);
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(s.message(), "No space left on device");
  EXPECT_CONTAINS(s.message(), dir.file("b"));
  Status again = (*a)->append("z", 1);
  EXPECT_FALSE(again.ok());
  EXPECT_CONTAINS(again.message(), dir.file("a"));
  EXPECT_EQ(env.bytes_appended(), 13);
  ASSERT_TRUE((*a)->close().ok());
  ASSERT_TRUE((*b)->close().ok());
  EXPECT_EQ(read_file(dir.file("a")), "123456");
  EXPECT_EQ(read_file(dir.file("b")), "abcd");
  // Renames still work in this plan; other calls pass through.
  EXPECT_TRUE(env.rename_file(dir.file("a"), dir.file("c")).ok());
  EXPECT_TRUE(env.file_exists(dir.file("c")));
  auto names = env.list_dir(dir.path());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"b", "c"}));
}

TEST(FaultyStoreEnvTest, ExactLimitFitsAndRenamesFail) {
  ScopedTempDir dir("faulty_env2");
  FaultyStoreEnv env(default_store_env(), StoreFaultPlan{4, true});
  auto a = env.new_writable_file(dir.file("a"));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE((*a)->append("1234", 4).ok());  // exactly at the limit
  EXPECT_FALSE((*a)->append("5", 1).ok());
  ASSERT_TRUE((*a)->close().ok());
  EXPECT_EQ(read_file(dir.file("a")), "1234");
  Status r = env.rename_file(dir.file("a"), dir.file("b"));
  ASSERT_FALSE(r.ok());
  EXPECT_CONTAINS(r.message(), dir.file("a"));
  EXPECT_TRUE(env.file_exists(dir.file("a")));
  EXPECT_FALSE(env.file_exists(dir.file("b")));

  FaultyStoreEnv never(default_store_env(), StoreFaultPlan{});
  auto n = never.new_writable_file(dir.file("n"));
  ASSERT_TRUE(n.ok());
  const std::string big(1 << 20, 'q');
  EXPECT_TRUE((*n)->append(big.data(), big.size()).ok());
}

}  // namespace
}  // namespace moe
