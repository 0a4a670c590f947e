// Process launch (include/moe/launch.h) outside mpirun, and the capacity rule of
// EngineOptions (include/moe/engine_options.h). Under mpirun the same paths are run by
// tests/e2e/ep_mpirun_test.cc (EpSizeMustMatchRanks, DifferentModelFiles...).
#include <gtest/gtest.h>

#include <cstdlib>

#include "contains_util.h"
#include "moe/engine_options.h"
#include "moe/launch.h"
#include "test_util.h"

namespace moe {
namespace {

// This test is never started by mpirun; make sure the environment agrees.
class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("OMPI_COMM_WORLD_SIZE");
    ::unsetenv("PMI_SIZE");
  }
};

TEST(EngineOptionsTest, CapacityFactorAloneMeansDrop) {
  EngineOptions o;
  EXPECT_EQ(resolved_overflow_policy(o), "dropless");
  EXPECT_EQ(resolved_capacity_factor(o), 1.0);
  o.capacity_factor = 0.5;
  EXPECT_EQ(resolved_overflow_policy(o), "drop");
  EXPECT_EQ(resolved_capacity_factor(o), 0.5);
}

TEST(EngineOptionsTest, AGivenOverflowPolicyWins) {
  EngineOptions o;
  o.overflow_policy = "reroute";
  EXPECT_EQ(resolved_overflow_policy(o), "reroute");
  EXPECT_EQ(resolved_capacity_factor(o), 1.0);
  o.capacity_factor = 2.0;
  EXPECT_EQ(resolved_overflow_policy(o), "reroute");
  o.overflow_policy = "dropless";
  EXPECT_EQ(resolved_overflow_policy(o), "dropless");
}

TEST_F(LaunchTest, WithoutMpirunTheSessionIsANoOp) {
  EXPECT_FALSE(launched_under_mpi());
  auto s = MpiSession::start(nullptr, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_FALSE(s.value().active());
}

TEST_F(LaunchTest, OneProcessOpensTheEngineWithoutACommunicator) {
  auto opened = launch_engine({.model_dir = testing::tiny_model_dir(), .num_threads = 1}, {});
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ(opened.value().comm, nullptr);
  ASSERT_NE(opened.value().engine, nullptr);
  EXPECT_EQ(opened.value().rank, 0);
  EXPECT_EQ(opened.value().num_ranks, 1);
  EXPECT_GT(opened.value().engine->info().num_experts, 0);
}

TEST_F(LaunchTest, EpAboveOneWithoutMpirunSaysHowToRunIt) {
  auto opened = launch_engine({.model_dir = testing::tiny_model_dir()}, {.ep = 2, .command = "serve"});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(opened.status().message(), "--ep 2 needs 2 processes: run it as mpirun -np 2 moe serve --ep 2");
}

TEST_F(LaunchTest, BadCommBackendAndGlooStoreWithoutGlooNameTheFlag) {
  auto opened = launch_engine({.model_dir = testing::tiny_model_dir()}, {.comm_backend = "tcp"});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(opened.status().message(), "--comm-backend must be mpi or gloo (got 'tcp')");
  opened = launch_engine({.model_dir = testing::tiny_model_dir()}, {.gloo_store_dir = "/tmp/x"});
  ASSERT_FALSE(opened.ok());
  EXPECT_CONTAINS(opened.status().message(), "--gloo-store applies to --comm-backend gloo");
}

TEST_F(LaunchTest, TensorParallelWithoutMpirunNamesTheFlags) {
  EpLaunchOptions launch{.ep = 2, .command = "serve"};
  launch.tp = 2;
  auto opened = launch_engine({.model_dir = testing::tiny_model_dir()}, launch);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(opened.status().message(), "--tp 2 needs 4 processes: run it as mpirun -np 4 moe serve --tp 2 --ep 2");
  launch.ep = 0;  // EP size from mpirun's ranks
  EXPECT_CONTAINS(launch_engine({.model_dir = testing::tiny_model_dir()}, launch).status().message(),
                  "--tp 2 needs 2 processes: run it as mpirun -np 2 moe serve --tp 2 ...");
  launch.tp = 0;
  EXPECT_CONTAINS(launch_engine({.model_dir = testing::tiny_model_dir()}, launch).status().message(),
                  "--tp must be >= 1 (got 0)");
  launch.tp = 1;  // --ep 0 is only "from the ranks" with --tp
  EXPECT_CONTAINS(launch_engine({.model_dir = testing::tiny_model_dir()}, launch).status().message(),
                  "--ep must be >= 1 (got 0)");
  launch = EpLaunchOptions{.ep = 2, .comm_backend = "gloo"};
  launch.tp = 2;
  EXPECT_CONTAINS(launch_engine({.model_dir = testing::tiny_model_dir()}, launch).status().message(),
                  "--tp 2 with --comm-backend gloo: failover cannot re-form tensor-parallel groups");
}

TEST_F(LaunchTest, BadEpAndRanksPerNodeNameTheFlag) {
  auto opened = launch_engine({.model_dir = testing::tiny_model_dir()}, {.ep = 0});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(opened.status().message(), "--ep must be >= 1 (got 0)");
  opened = launch_engine({.model_dir = testing::tiny_model_dir()}, {.ranks_per_node = -1});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(opened.status().message(), "--ranks-per-node must be >= 0 (got -1)");
}

TEST_F(LaunchTest, ACommunicatorInTheOptionsIsRejected) {
  EngineOptions o{.model_dir = testing::tiny_model_dir()};
  o.comm = reinterpret_cast<Communicator*>(&o);  // never used: rejected first
  auto opened = launch_engine(o, {});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(opened.status().message(), "EngineOptions.comm");
}

TEST_F(LaunchTest, EngineErrorsPassThroughWithoutARankPrefixInOneProcess) {
  auto opened = launch_engine({.model_dir = "/nonexistent/launch-model"}, {});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(opened.status().message(), "/nonexistent/launch-model");
  EXPECT_EQ(opened.status().message().find("rank "), std::string::npos) << opened.status().message();
}

TEST_F(LaunchTest, AnUnknownOverflowPolicyIsAnError) {
  EngineOptions o{.model_dir = testing::tiny_model_dir()};
  o.overflow_policy = "spill";
  auto opened = launch_engine(o, {});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(opened.status().message(), "spill");
}

}  // namespace
}  // namespace moe
