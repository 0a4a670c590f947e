// `moe generate` and `moe serve` on a model whose config.json asks for more than its
// weights hold (num_hidden_layers 1000000000 over a 4-layer checkpoint): exit 1 within a
// few seconds, naming the field, its value and the layers the checkpoint has. Both used
// to hang, sizing per-layer state by the config.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::run_command;
using moe::testing::ScopedTempDir;
using moe::testing::sh_quote;
using moe::testing::tiny_model_dir;

class ConfigSizesCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& entry : fs::directory_iterator(tiny_model_dir())) {
      const std::string name = entry.path().filename().string();
      if (name != "config.json") fs::create_symlink(entry.path(), dir_.file(name));
    }
    nlohmann::json config = moe::testing::read_json(tiny_model_dir() + "/config.json");
    config["num_hidden_layers"] = 1000000000;
    moe::testing::write_json(dir_.file("config.json"), config);
  }

  // `moe <sub> --model <dir> <args>` under a 60 s cap (a hang fails the test, not ctest).
  CommandResult run(const std::string& sub, const std::string& args, double* seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    CommandResult r = run_command("timeout 60 " + moe_binary() + " " + sub + " --model " + sh_quote(dir_.path()) + " " + args);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  std::string message() const {
    return "error: " + dir_.file("config.json") +
           ": num_hidden_layers 1000000000, but the checkpoint has weights for 4 layers (model.layers.0-3)";
  }

  ScopedTempDir dir_{"config_sizes_cli"};
};

TEST_F(ConfigSizesCliTest, GenerateExitsWithTheMessage) {
  double seconds = 0;
  const CommandResult r = run("generate", "--prompt hi --max-tokens 1", &seconds);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, message());
  EXPECT_LT(seconds, 5.0);
}

TEST_F(ConfigSizesCliTest, ServeExitsWithTheMessage) {
  double seconds = 0;
  const CommandResult r = run("serve", "--port 0", &seconds);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, message());
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace moe
