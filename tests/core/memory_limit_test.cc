// memory_limit(): the smallest of MemTotal and the cgroup limits on the way to the root,
// over a fake /proc and cgroup tree whose expected answers are the values written here.
#include "moe/core/memory_limit.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace moe {
namespace {

void write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

struct FakeTree {
  std::string dir = testing::make_temp_dir("memory_limit");
  std::string root = dir + "/cgroup", proc = dir + "/cgroup_self", meminfo = dir + "/meminfo";
  ~FakeTree() { std::filesystem::remove_all(dir); }
  MemoryLimit read() const { return memory_limit(root, proc, meminfo); }
};

TEST(MemoryLimit, MemTotalWhenNoCgroupLimits) {
  FakeTree t;
  write(t.meminfo, "MemTotal:       24683792 kB\nMemFree:  100 kB\n");
  write(t.proc, "0::/\n");
  write(t.root + "/memory.max", "max\n");
  const MemoryLimit m = t.read();
  EXPECT_EQ(m.bytes, 24683792ull * 1024);
  EXPECT_EQ(m.source, "MemTotal");
}

TEST(MemoryLimit, CgroupV1TheSmallestOnThePathWins) {
  FakeTree t;
  write(t.meminfo, "MemTotal: 1000000 kB\n");
  write(t.proc, "9:pids:/\n4:memory:/job/task\n0::/\n");
  write(t.root + "/memory/memory.limit_in_bytes", "9223372036854771712\n");
  write(t.root + "/memory/job/memory.limit_in_bytes", "300000000\n");
  write(t.root + "/memory/job/task/memory.limit_in_bytes", "500000000\n");
  const MemoryLimit m = t.read();
  EXPECT_EQ(m.bytes, 300000000u);
  EXPECT_EQ(m.source, t.root + "/memory/job/memory.limit_in_bytes");
}

TEST(MemoryLimit, AContainersMountAtAnAncestorIsFound) {
  // /proc/self/cgroup names the host's path; the container sees its own cgroup as the root.
  FakeTree t;
  write(t.meminfo, "MemTotal: 1000000 kB\n");
  write(t.proc, "4:memory:/process_api/abc/job\n");
  write(t.root + "/memory/memory.limit_in_bytes", "9223372036854771712\n");
  write(t.root + "/memory/job/memory.limit_in_bytes", "123456789\n");
  const MemoryLimit m = t.read();
  EXPECT_EQ(m.bytes, 123456789u);
  EXPECT_EQ(m.source, t.root + "/memory/job/memory.limit_in_bytes");
}

TEST(MemoryLimit, CgroupV2MemoryMax) {
  FakeTree t;
  write(t.meminfo, "MemTotal: 1000000 kB\n");
  write(t.proc, "0::/user.slice/app\n");
  write(t.root + "/user.slice/memory.max", "max\n");
  write(t.root + "/user.slice/app/memory.max", "268435456\n");
  EXPECT_EQ(t.read().bytes, 268435456u);
}

TEST(MemoryLimit, UnreadableOrMalformedFilesAreSkipped) {
  FakeTree t;
  write(t.meminfo, "MemTotal: 2048 kB\n");
  write(t.proc, "garbage\n4:memory:/a\n");
  write(t.root + "/memory/a/memory.limit_in_bytes", "12abc\n");
  const MemoryLimit m = t.read();
  EXPECT_EQ(m.bytes, 2048u * 1024);
  EXPECT_EQ(m.source, "MemTotal");
  EXPECT_EQ(memory_limit(t.root, t.proc, t.dir + "/missing").bytes, 0u);
}

TEST(MemoryLimit, ThisMachineHasOne) {
  // The real files: at least MemTotal is readable on Linux.
  const MemoryLimit m = memory_limit();
  EXPECT_GT(m.bytes, 0u);
  EXPECT_FALSE(m.source.empty());
}

}  // namespace
}  // namespace moe
