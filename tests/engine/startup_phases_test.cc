// The start-up lines at info: Engine::open's phases (one "start-up:" line, each phase
// with its time, then the total) and Scheduler::create's KV pool and workspaces.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "contains_util.h"
#include "log_capture.h"
#include "moe/engine.h"
#include "moe/scheduler.h"
#include "test_util.h"

namespace moe {
namespace {

// The "start-up: ..." line of `log`, or "".
std::string startup_line(const std::string& log, const std::string& first_phase) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("start-up: " + first_phase + "[^\n]*")) ? m.str() : "";
}

TEST(StartupPhasesTest, EngineOpenLogsEachPhase) {
  for (const std::string hugepages : {"on", "off"}) {
    SCOPED_TRACE(hugepages);
    testing::LogCapture log;
    spdlog::set_level(spdlog::level::info);
    auto engine = Engine::open({.model_dir = testing::tiny_model_dir(), .num_threads = 1, .hugepages = hugepages});
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    const std::string line = startup_line(log.text(), "open files");
    ASSERT_FALSE(line.empty()) << log.text();
    const std::string ms = " [0-9]+(\\.[0-9])? ms";
    std::string phases = "open files" + ms + ", config" + ms + ", options and placement" + ms + ", bind weights" + ms +
                         ", tokenizer" + ms + ", weight scan" + ms + ", ";
    phases += hugepages == "on" ? "huge-page copy" + ms + ", decoder" + ms + ", other" + ms
                                : "other" + ms + ", decoder" + ms;
    EXPECT_TRUE(std::regex_match(line, std::regex("start-up: " + phases + ", total" + ms))) << line;
    if (hugepages == "on") {
      EXPECT_CONTAINS(log.text(), "but the matrices, which the huge-page copy checks");
      EXPECT_CONTAINS(log.text(), "and checked for NaN/Inf in");
    }
  }
}

TEST(StartupPhasesTest, SchedulerLogsItsPoolAndWorkspaces) {
  auto engine = Engine::open({.model_dir = testing::tiny_model_dir(), .num_threads = 1});
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  testing::LogCapture log;
  spdlog::set_level(spdlog::level::info);
  auto scheduler = Scheduler::create(engine->get(), SchedulerOptions{});
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().to_string();
  const std::string line = startup_line(log.text(), "KV pool");
  const std::string ms = " [0-9]+(\\.[0-9])? ms";
  EXPECT_TRUE(std::regex_match(line, std::regex("start-up: KV pool" + ms + ", workspaces" + ms + ", total" + ms +
                                                " \\(allocation and first touch\\)")))
      << log.text();
}

}  // namespace
}  // namespace moe
