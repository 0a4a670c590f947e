// `moe serve` inside a memory cgroup (v1, as this machine has): a KV pool that fits the
// machine but not the cgroup's limit is refused at start, naming the limit file, instead
// of being OOM-killed once the pool fills. Needs root and a writable memory cgroup tree;
// without one the test says so and is skipped.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "contains_util.h"
#include "test_util.h"

namespace moe {
namespace {

TEST(KvMemoryLimitCliTest, APoolOverTheCgroupLimitIsRefusedAtStart) {
  const std::string cg = "/sys/fs/cgroup/memory/moe_kv_test_" + std::to_string(::getpid());
  std::error_code ec;
  if (!std::filesystem::create_directory(cg, ec)) {
    GTEST_SKIP() << "no writable memory cgroup v1 tree (" << cg << ": " << ec.message() << ")";
  }
  { std::ofstream(cg + "/memory.limit_in_bytes") << (256 << 20); }
  // 10M tokens of the tiny model's KV (2 KiB each: 20 GB) fit under 0.9 of this machine's
  // 24 GiB but not under 256 MiB.
  const std::string serve = moe::testing::moe_binary() + " serve --model " +
                            moe::testing::tiny_model_dir() +
                            " --port 0 --threads 1 --kv-cache-tokens 10000000";
  const auto r = moe::testing::run_command("sh -c 'echo $$ > " + cg + "/cgroup.procs && exec " + serve + "'");
  std::filesystem::remove(cg, ec);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: the KV cache (10000000 tokens, ");
  EXPECT_CONTAINS(r.output, "moe_kv_test_" + std::to_string(::getpid()) + "/memory.limit_in_bytes");
  EXPECT_CONTAINS(r.output, "of 0.27 GB");  // 256 MiB
}

}  // namespace
}  // namespace moe
