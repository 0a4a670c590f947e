// `moe serve --config FILE` with fault_tolerance.supervise: true: the supervisor takes the
// file's values as the flags they stand for and hands them to its worker group as flags
// (--capacity-factor=0.25 ...), never the file itself (the workers would re-read it).
#include <string>

#include <gtest/gtest.h>

#include "contains_util.h"
#include "serve_process.h"

namespace moe::testing {
namespace {

TEST(ServeConfig, SupervisedWorkersGetTheFilesValuesAsFlags) {
  const std::string dir = make_temp_dir("serve_config");
  write_file(dir + "/c.yaml",
             "parallelism:\n  threads: 1\nrouter:\n  capacity_factor: 0.25\n  token_drop_policy: drop\n"
             "fault_tolerance:\n  supervise: true\n");
  ServeProcess server({"--config", dir + "/c.yaml"});
  ASSERT_GT(server.port(), 0) << server.log();
  httplib::Client client("127.0.0.1", server.port());
  auto health = client.Get("/health");
  ASSERT_TRUE(health) << server.log();
  const nlohmann::json h = nlohmann::json::parse(health->body);
  ASSERT_TRUE(h.contains("worker_pids")) << health->body;  // supervised
  const std::string cmdline = read_file("/proc/" + std::to_string(h["worker_pids"][0].get<int>()) + "/cmdline");
  std::string args;
  for (char c : cmdline) args += c == '\0' ? ' ' : c;
  EXPECT_CONTAINS(args, "--capacity-factor=0.25");
  EXPECT_CONTAINS(args, "--overflow-policy=drop");
  EXPECT_CONTAINS(args, "--threads=1");
  EXPECT_EQ(args.find("--config"), std::string::npos) << args;
  auto r = client.Post("/v1/completions", R"({"prompt":"ROMEO:","max_tokens":2,"temperature":0})", "application/json");
  ASSERT_TRUE(r) << server.log();
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace moe::testing
