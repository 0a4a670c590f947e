// The EP session's step protocol on the in-process communicator (ranks as threads),
// with fake step runners and a manual clock (no sleeps): the worker loop follows step,
// idle and rebalance headers and stops on the stop header; the idle heartbeat goes out
// once the heartbeat period has passed on the clock; the rebalance trigger fires every
// N steps; a failed rebalance keeps the loop going unless the communicator broke; the
// start-up agreement fails every rank when one fails or the fingerprints differ; a dead
// rank 0 ends the worker within the communicator's timeout.
#include "moe/runtime/ep_session.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "contains_util.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/core/clock.h"

namespace moe {
namespace {

// Each step and rebalance is one allreduce on every rank, as the engine's are
// collectives: rank 0 runs the matching one itself.
class FakeRunner final : public EpStepRunner {
 public:
  explicit FakeRunner(Communicator* comm) : comm_(comm) {}
  Status join_step() override {
    ++steps;
    return collective();
  }
  Status rebalance() override {
    ++rebalances;
    MOE_RETURN_IF_ERROR(collective());
    return rebalance_result;
  }
  Status collective() {
    int64_t x = 1;
    return comm_->allreduce_sum(&x, 1);
  }
  int steps = 0, rebalances = 0;
  Status rebalance_result = ok_status();

 private:
  Communicator* comm_;
};

// Counters each rank's session saw, collected after run_ranks.
struct Seen {
  std::mutex mu;
  std::vector<EpSessionCounters> counters;
  std::vector<int> steps, rebalances;
  explicit Seen(int n) : counters(static_cast<size_t>(n)), steps(static_cast<size_t>(n)), rebalances(static_cast<size_t>(n)) {}
  void record(Communicator& comm, const EpSession& s, const FakeRunner& r) {
    std::lock_guard<std::mutex> lock(mu);
    const auto i = static_cast<size_t>(comm.rank());
    counters[i] = s.counters();
    steps[i] = r.steps;
    rebalances[i] = r.rebalances;
  }
};

TEST(ManualClock, MovesOnlyWhenTold) {
  ManualClock clock(10);
  EXPECT_EQ(clock.now_seconds(), 10);
  clock.advance(2.5);
  EXPECT_EQ(clock.now_seconds(), 12.5);
  clock.set(1);
  EXPECT_EQ(clock.now_seconds(), 1);
  const double a = system_clock().now_seconds();
  EXPECT_LE(a, system_clock().now_seconds());
}

TEST(EpSession, WorkerLoopFollowsStepsAndStopsOnStopHeader) {
  InProcessGroup group(3, 0, 30);
  Seen seen(3);
  ManualClock clock;
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    FakeRunner runner(&comm);
    EpSession session(&comm, &runner, &clock);
    if (comm.rank() != 0) {
      EXPECT_FALSE(session.is_leader());
      MOE_RETURN_IF_ERROR(session.run_worker());
    } else {
      EXPECT_TRUE(session.is_leader());
      for (int i = 0; i < 2; ++i) {
        MOE_RETURN_IF_ERROR(session.announce_step(5));
        MOE_RETURN_IF_ERROR(runner.collective());
      }
      MOE_RETURN_IF_ERROR(session.stop_workers());
      EXPECT_TRUE(session.workers_stopped());
      MOE_RETURN_IF_ERROR(session.stop_workers());  // idempotent: no second header
    }
    seen.record(comm, session, runner);
    return comm.barrier();  // a second stop header would not match this
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(seen.counters[static_cast<size_t>(r)].steps, 2);
    EXPECT_EQ(seen.counters[static_cast<size_t>(r)].stops, 1);
    EXPECT_EQ(seen.counters[static_cast<size_t>(r)].idles, 0);
    EXPECT_EQ(seen.steps[static_cast<size_t>(r)], r == 0 ? 0 : 2);
  }
}

TEST(EpSession, HeartbeatGoesOutWhenTheIdlePeriodHasPassedOnTheClock) {
  InProcessGroup group(2, 0, 30);
  Seen seen(2);
  ManualClock clock(100);
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    FakeRunner runner(&comm);
    EpSession session(&comm, &runner, &clock);
    if (comm.rank() != 0) {
      MOE_RETURN_IF_ERROR(session.run_worker());
    } else {
      session.mark_active();  // t = 100
      clock.set(104.9);
      MOE_RETURN_IF_ERROR(session.heartbeat_if_idle(5));
      EXPECT_EQ(session.counters().idles, 0);
      clock.set(105);
      MOE_RETURN_IF_ERROR(session.heartbeat_if_idle(5));
      EXPECT_EQ(session.counters().idles, 1);
      MOE_RETURN_IF_ERROR(session.heartbeat_if_idle(5));  // the heartbeat counts as activity
      EXPECT_EQ(session.counters().idles, 1);
      // A step is activity too: no heartbeat within the period after it.
      clock.set(107);
      MOE_RETURN_IF_ERROR(session.announce_step(1));
      MOE_RETURN_IF_ERROR(runner.collective());
      session.mark_active();
      clock.set(111);
      MOE_RETURN_IF_ERROR(session.heartbeat_if_idle(5));
      EXPECT_EQ(session.counters().idles, 1);
      clock.set(112);
      MOE_RETURN_IF_ERROR(session.heartbeat_if_idle(5));
      EXPECT_EQ(session.counters().idles, 2);
      MOE_RETURN_IF_ERROR(session.stop_workers());
    }
    seen.record(comm, session, runner);
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(seen.counters[1].idles, 2);
  EXPECT_EQ(seen.counters[1].steps, 1);
  EXPECT_EQ(seen.counters[1].stops, 1);
}

TEST(EpSession, RebalanceTriggerFiresEveryNSteps) {
  InProcessGroup group(3, 0, 30);
  Seen seen(3);
  ManualClock clock;
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    FakeRunner runner(&comm);
    EpSession session(&comm, &runner, &clock, {.rebalance_every = 3});
    if (comm.rank() != 0) {
      MOE_RETURN_IF_ERROR(session.run_worker());
    } else {
      for (int i = 1; i <= 7; ++i) {
        MOE_RETURN_IF_ERROR(session.announce_step(1));
        MOE_RETURN_IF_ERROR(runner.collective());
        MOE_RETURN_IF_ERROR(session.after_step());
        EXPECT_EQ(runner.rebalances, i / 3) << "after step " << i;
      }
      MOE_RETURN_IF_ERROR(session.stop_workers());
    }
    seen.record(comm, session, runner);
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(seen.rebalances[static_cast<size_t>(r)], 2);
    EXPECT_EQ(seen.counters[static_cast<size_t>(r)].rebalances, 2);
    EXPECT_EQ(seen.counters[static_cast<size_t>(r)].steps, 7);
  }
}

TEST(EpSession, NoRebalanceWhenNotAsked) {
  InProcessGroup group(2, 0, 30);
  ManualClock clock;
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    FakeRunner runner(&comm);
    EpSession session(&comm, &runner, &clock);  // rebalance_every = 0
    if (comm.rank() != 0) return session.run_worker();
    for (int i = 0; i < 10; ++i) MOE_RETURN_IF_ERROR(session.after_step());
    EXPECT_EQ(runner.rebalances, 0);
    EXPECT_EQ(session.counters().rebalances, 0);
    return session.stop_workers();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
}

TEST(EpSession, FailedRebalanceKeepsTheLoopGoing) {
  InProcessGroup group(2, 0, 30);
  ManualClock clock;
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    FakeRunner runner(&comm);
    runner.rebalance_result = data_loss("migration failed (test)");
    EpSession session(&comm, &runner, &clock, {.rebalance_every = 1});
    if (comm.rank() != 0) return session.run_worker();
    MOE_RETURN_IF_ERROR(session.after_step());  // the error stays inside the session
    MOE_RETURN_IF_ERROR(session.announce_step(1));
    MOE_RETURN_IF_ERROR(runner.collective());
    return session.stop_workers();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
}

TEST(EpSession, RebalanceCommunicationFailureEndsBothSides) {
  InProcessGroup group(2, 0, 30);
  ManualClock clock;
  std::vector<Status> results(2);
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    FakeRunner runner(&comm);
    runner.rebalance_result = Status(StatusCode::kUnavailable, "peer gone (test)");
    EpSession session(&comm, &runner, &clock, {.rebalance_every = 1});
    results[static_cast<size_t>(comm.rank())] = comm.rank() != 0 ? session.run_worker() : session.after_step();
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_CONTAINS(s.message(), "peer gone");
  }
}

TEST(EpSession, StepFailureEndsTheWorker) {
  class FailingRunner final : public EpStepRunner {
   public:
    Status join_step() override { return internal_error("step failed (test)"); }
    Status rebalance() override { return ok_status(); }
  };
  InProcessGroup group(2, 0, 30);
  ManualClock clock;
  std::vector<Status> results(2);
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    FailingRunner runner;
    EpSession session(&comm, &runner, &clock);
    results[static_cast<size_t>(comm.rank())] = comm.rank() != 0 ? session.run_worker() : session.announce_step(3);
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(results[0].ok()) << results[0].to_string();
  EXPECT_CONTAINS(results[1].message(), "step failed");
}

// Rank 0 dies after one step (it never sends another header): the worker's wait for
// the next header ends with DeadlineExceeded within the communicator's timeout, so a
// dead leader never leaves a worker blocked.
TEST(EpSession, DeadLeaderEndsTheWorkerWithinTheTimeout) {
  InProcessGroup group(2, 0, /*timeout_seconds=*/0.3);
  ManualClock clock;
  std::vector<Status> results(2);
  std::vector<double> seconds(2, 0);
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    FakeRunner runner(&comm);
    EpSession session(&comm, &runner, &clock);
    const auto t0 = std::chrono::steady_clock::now();
    if (comm.rank() == 0) {
      MOE_RETURN_IF_ERROR(session.announce_step(1));
      results[0] = runner.collective();
      return ok_status();  // "dies": no further header, no stop
    }
    results[1] = session.run_worker();
    seconds[1] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(results[0].ok()) << results[0].to_string();
  EXPECT_EQ(results[1].code(), StatusCode::kDeadlineExceeded) << results[1].to_string();
  EXPECT_CONTAINS(results[1].message(), "waiting for rank 0's next step");
  EXPECT_GE(seconds[1], 0.3);
  EXPECT_LT(seconds[1], 3.0);
}

// Start-up vs steady deadlines: the group is made with the long start-up deadline (2 s);
// rank 0 takes 0.6 s before its first header (building its scheduler), longer than the
// steady deadline (0.3 s) but within the start-up one, so the worker waits for it; after
// that first header the worker's waits use the steady deadline, so rank 0's death then
// ends the worker within about 0.3 s, not 2 s.
TEST(EpSession, WorkerSwitchesToTheSteadyDeadlineAfterTheFirstHeader) {
  InProcessGroup group(2, 0, /*timeout_seconds=*/2.0);
  ManualClock clock;
  Status worker;
  double timeout_seen = 0;
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    FakeRunner runner(&comm);
    EpSession session(&comm, &runner, &clock, EpSessionOptions{.steady_timeout_seconds = 0.3});
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      MOE_RETURN_IF_ERROR(session.announce_step(1));
      MOE_RETURN_IF_ERROR(runner.collective());
      return ok_status();  // "dies": no further header
    }
    worker = session.run_worker();  // joins the step, then waits for the next header
    timeout_seen = comm.timeout_seconds();
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(worker.code(), StatusCode::kDeadlineExceeded) << worker.to_string();
  EXPECT_CONTAINS(worker.message(), "timed out after 0.3 s");
  EXPECT_DOUBLE_EQ(timeout_seen, 0.3);
}

TEST(EpSession, SingleProcessIsANoOp) {
  ManualClock clock;
  class NeverRunner final : public EpStepRunner {
   public:
    Status join_step() override { return internal_error("no steps without EP"); }
    Status rebalance() override { return internal_error("no rebalancing without EP"); }
  } runner;
  EpSession session(nullptr, &runner, &clock, {.rebalance_every = 1});
  EXPECT_TRUE(session.is_leader());
  EXPECT_TRUE(session.announce_step(4).ok());
  clock.advance(1000);
  EXPECT_TRUE(session.heartbeat_if_idle(1).ok());
  EXPECT_TRUE(session.after_step().ok());
  EXPECT_TRUE(session.stop_workers().ok());
  const Status w = session.run_worker();
  EXPECT_EQ(w.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(w.message(), "run_worker()");
  EXPECT_EQ(session.counters().steps + session.counters().idles + session.counters().rebalances, 0);
}

TEST(EpSession, RunWorkerOnRankZeroIsAnError) {
  InProcessGroup group(1);
  ManualClock clock;
  FakeRunner runner(&group.rank(0));
  EpSession session(&group.rank(0), &runner, &clock);
  const Status st = session.run_worker();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(st.message(), "ranks other than 0");
}

// Start-up agreement: every rank's result for (loaded?, fingerprint) per rank.
std::vector<Status> agree(int n, const std::vector<Status>& local, const std::vector<uint64_t>& fingerprints) {
  InProcessGroup group(n, 0, 30);
  std::vector<Status> results(static_cast<size_t>(n));
  std::mutex mu;
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const auto r = static_cast<size_t>(comm.rank());
    Status agreed = EpSession::agree_on_startup(comm, local[r], fingerprints[r]);
    std::lock_guard<std::mutex> lock(mu);
    results[r] = agreed;
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
  return results;
}

TEST(EpSessionStartup, AllLoadedTheSameModel) {
  for (const Status& s : agree(3, {ok_status(), ok_status(), ok_status()}, {7, 7, 7})) EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(EpSessionStartup, OneRankFailingFailsEveryRank) {
  const auto results = agree(3, {ok_status(), not_found("/no/model (test)"), ok_status()}, {7, 0, 7});
  EXPECT_EQ(results[1].code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(results[1].message(), "/no/model");
  for (int r : {0, 2}) {
    EXPECT_EQ(results[static_cast<size_t>(r)].code(), StatusCode::kFailedPrecondition);
    EXPECT_CONTAINS(results[static_cast<size_t>(r)].message(), "rank(s) 1 failed");
  }
}

TEST(EpSessionStartup, DifferentFingerprintsFailEveryRank) {
  const auto results = agree(3, {ok_status(), ok_status(), ok_status()}, {7, 7, 8});
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_CONTAINS(s.message(), "rank 2 loaded a different model");
  }
}

}  // namespace
}  // namespace moe
