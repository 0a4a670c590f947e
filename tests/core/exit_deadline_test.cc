// ExitDeadline: a guarded scope that overruns ends the process with _exit(code) after
// naming the stuck call; one that ends in time disarms the watchdog (no exit, no delay).
#include "moe/core/exit_deadline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace moe {
namespace {

TEST(ExitDeadlineDeathTest, OverrunExitsNamingTheCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ExitDeadline guard("MPI_Finalize (waiting for the other ranks)", 0.2);
        std::this_thread::sleep_for(std::chrono::seconds(20));
      },
      ::testing::ExitedWithCode(1), "MPI_Finalize \\(waiting for the other ranks\\) did not return within 0.2 s");
  EXPECT_EXIT(
      {
        ExitDeadline guard("MPI_Abort", 0.1, 7);
        std::this_thread::sleep_for(std::chrono::seconds(20));
      },
      ::testing::ExitedWithCode(7), "MPI_Abort did not return within 0.1 s");
}

TEST(ExitDeadlineTest, ScopeEndingInTimeDisarms) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    ExitDeadline guard("fast call", 30);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Destruction does not wait for the deadline.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  // Still alive well after a short deadline that was disarmed.
  {
    ExitDeadline guard("another call", 0.05);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  SUCCEED();
}

}  // namespace
}  // namespace moe
