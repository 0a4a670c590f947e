// write_file_atomically: temp file in the same directory, fsync, rename; on error the old
// file stays and no temp file is left behind.
#include "moe/core/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace moe {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("atomic_file_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }

  fs::path dir_;
};

TEST_F(AtomicFileTest, CreatesANewFile) {
  const fs::path p = dir_ / "out.json";
  ASSERT_TRUE(write_file_atomically(p.string(), "{\"a\": 1}\n").ok());
  EXPECT_EQ(read(p), "{\"a\": 1}\n");
  EXPECT_EQ(entries(), std::vector<std::string>{"out.json"});
}

TEST_F(AtomicFileTest, ReplacesAnExistingFileWholly) {
  const fs::path p = dir_ / "plan.json";
  { std::ofstream(p) << "an old and much longer content that must not survive"; }
  ASSERT_TRUE(write_file_atomically(p.string(), "new").ok());
  EXPECT_EQ(read(p), "new");
  EXPECT_EQ(entries(), std::vector<std::string>{"plan.json"});
}

TEST_F(AtomicFileTest, WritesBinaryBytesAsTheyAre) {
  const fs::path p = dir_ / "logits.bin";
  const std::string bytes("\x00\x01\xff\n\r\x00", 6);
  ASSERT_TRUE(write_file_atomically(p.string(), bytes).ok());
  EXPECT_EQ(read(p), bytes);
  EXPECT_EQ(fs::file_size(p), 6u);
}

TEST_F(AtomicFileTest, EmptyContentsMakeAnEmptyFile) {
  const fs::path p = dir_ / "empty";
  ASSERT_TRUE(write_file_atomically(p.string(), "").ok());
  EXPECT_TRUE(fs::exists(p));
  EXPECT_EQ(fs::file_size(p), 0u);
}

TEST_F(AtomicFileTest, MissingDirectoryIsAnErrorNamingThePath) {
  const fs::path p = dir_ / "no_such_dir" / "out.json";
  const Status st = write_file_atomically(p.string(), "x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find((dir_ / "no_such_dir").string()), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("No such file or directory"), std::string::npos) << st.message();
}

TEST_F(AtomicFileTest, FailedRenameLeavesTheOldTargetAndRemovesTheTempFile) {
  // The target is a non-empty directory: the rename fails after the temp file was written.
  const fs::path p = dir_ / "target";
  fs::create_directories(p);
  { std::ofstream(p / "keep.txt") << "old"; }
  const Status st = write_file_atomically(p.string(), "new contents");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(p.string()), std::string::npos) << st.message();
  EXPECT_TRUE(fs::is_directory(p));
  EXPECT_EQ(read(p / "keep.txt"), "old");
  EXPECT_EQ(entries(), std::vector<std::string>{"target"});  // no "target.tmp.*" left
}

TEST_F(AtomicFileTest, EmptyPathIsInvalidArgument) {
  const Status st = write_file_atomically("", "x");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("empty path"), std::string::npos);
}

TEST_F(AtomicFileTest, RelativePathInTheCurrentDirectory) {
  const fs::path old_cwd = fs::current_path();
  fs::current_path(dir_);
  const Status st = write_file_atomically("rel.txt", "r");
  fs::current_path(old_cwd);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(read(dir_ / "rel.txt"), "r");
}

}  // namespace
}  // namespace moe
