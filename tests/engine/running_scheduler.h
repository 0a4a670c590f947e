// Scheduler test helpers: RunningScheduler, a Scheduler whose run() loop is on its own
// thread (shut down and joined on destruction), and settled(), which polls the snapshot
// until a condition holds (snapshots are published at step boundaries, just after the
// events; up to 2 s, then the last snapshot).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "moe/scheduler.h"

namespace moe::testing {

inline ServiceSnapshot settled(const Scheduler& s, const std::function<bool(const ServiceSnapshot&)>& ok) {
  ServiceSnapshot snap = s.snapshot();
  for (int i = 0; i < 400 && !ok(snap); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    snap = s.snapshot();
  }
  return snap;
}

struct RunningScheduler {
  std::unique_ptr<Scheduler> sched;
  std::thread loop;
  Status status = ok_status();
  RunningScheduler(Engine* engine, const SchedulerOptions& o) {
    auto s = Scheduler::create(engine, o);
    EXPECT_TRUE(s.ok()) << s.status().message();
    sched = std::move(s).value();
    loop = std::thread([this] { status = sched->run(); });
  }
  ~RunningScheduler() {
    sched->shutdown(0);
    loop.join();
  }
  ServiceSnapshot settled(const std::function<bool(const ServiceSnapshot&)>& ok) const {
    return testing::settled(*sched, ok);
  }
};

}  // namespace moe::testing
