// `moe bench chaos`'s store copy (serve_bench/chaos_scratch.h): named after the process
// that made it; a later run removes the copies of processes no longer alive (a harness
// killed by a signal), and nothing else.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "moe/serve_bench/chaos_scratch.h"

namespace moe::serve_bench {
namespace {

namespace fs = std::filesystem;

std::string temp_root() {
  std::string t = fs::temp_directory_path().string() + "/chaos_scratch_test-XXXXXX";
  EXPECT_NE(::mkdtemp(t.data()), nullptr);
  return t;
}

// A pid that was alive a moment ago and is not now (reaped).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST(ChaosScratchTest, CopyIsNamedAfterThisProcess) {
  const std::string root = temp_root();
  auto dir = make_chaos_scratch_dir(root);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_TRUE(fs::is_directory(*dir));
  EXPECT_EQ(fs::path(*dir).filename().string().rfind("moe-chaos-store-" + std::to_string(::getpid()) + "-", 0), 0u)
      << *dir;
  auto bad = make_chaos_scratch_dir(root + "/no/such/dir");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(root + "/no/such/dir"), std::string::npos) << bad.status().message();
  fs::remove_all(root);
}

TEST(ChaosScratchTest, RemovesOnlyTheCopiesOfDeadProcesses) {
  const std::string root = temp_root();
  const std::string dead = root + "/moe-chaos-store-" + std::to_string(dead_pid()) + "-abc123";
  const std::string live = root + "/moe-chaos-store-" + std::to_string(::getpid()) + "-def456";
  const std::string old_format = root + "/moe-chaos-store-Xy12zQ";  // before the pid was in the name
  const std::string other = root + "/something-else-1";
  for (const std::string& d : {dead, live, old_format, other}) fs::create_directories(d + "/shards");
  std::ofstream(dead + "/shards/x.bin") << "bytes";
  std::ofstream(root + "/moe-chaos-store-1-file") << "a file, not a directory";
  const std::vector<std::string> removed = remove_stale_chaos_scratch(root);
  EXPECT_EQ(removed, std::vector<std::string>{dead});
  EXPECT_FALSE(fs::exists(dead));
  for (const std::string& d : {live, old_format, other, root + "/moe-chaos-store-1-file"}) {
    EXPECT_TRUE(fs::exists(d)) << d;
  }
  EXPECT_TRUE(remove_stale_chaos_scratch(root + "/missing").empty());
  fs::remove_all(root);
}

}  // namespace
}  // namespace moe::serve_bench
