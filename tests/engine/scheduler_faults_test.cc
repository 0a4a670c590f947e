// The Scheduler under expert parallelism with an injected fault (in-process EP group,
// FaultyCommunicator on rank 1): a peer that vanishes mid-generation fails the step;
// every request in flight then ends with finish_reason "error" naming the failure,
// health() reports "failed", new requests are refused, and run() returns the
// communication error. A slow peer makes health() report "stalled" while a step runs
// past the liveness timeout (without blocking), and "ok" again once it is done.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "contains_util.h"
#include "moe/comm/faulty_communicator.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/core/clock.h"
#include "moe/scheduler.h"
#include "seq_results.h"
#include "test_util.h"

namespace moe {
namespace {

using Result = testing::SeqResult;
using Results = testing::SeqResults;
using testing::greedy_request;


// Rank 0 runs a Scheduler on its rank thread while `client` (on its own thread) talks to
// it and finally calls shutdown(0) if the scheduler is still running. Returns run()'s
// status; rank 1's run_worker() status goes to *worker.
Status run_ep2(const FaultPlan& rank1_plan, double comm_timeout, const SchedulerOptions& so,
               const std::function<void(Scheduler&)>& client, Status* worker) {
  InProcessGroup group(2, 0, comm_timeout);
  FaultyCommunicator rank1(group.rank(1), rank1_plan);
  Status scheduler_status = ok_status();
  (void)run_ranks(group, [&](Communicator& inner) -> Status {
    Communicator& comm = inner.rank() == 1 ? static_cast<Communicator&>(rank1) : inner;
    EngineOptions opts{.model_dir = testing::tiny_model_dir(), .num_threads = 1, .comm = &comm};
    auto engine = Engine::open(opts);
    if (!engine.ok()) return engine.status();
    if (comm.rank() != 0) {
      *worker = engine.value()->run_worker();
      return ok_status();
    }
    auto sched = Scheduler::create(engine.value().get(), so);
    if (!sched.ok()) return sched.status();
    std::thread talk([&] {
      client(*sched.value());
      sched.value()->shutdown(0);
    });
    scheduler_status = sched.value()->run();
    talk.join();
    if (scheduler_status.ok()) return engine.value()->stop_workers();
    return ok_status();  // the group is broken: nothing more to say to rank 1
  });
  return scheduler_status;
}

TEST(SchedulerFaults, VanishedPeerFailsEveryRequestInFlight) {
  FaultPlan vanish;
  vanish.vanish_after_ops = 60;  // start-up takes a few; then a few steps' worth of exchanges
  Status worker = ok_status();
  ServiceHealth after;
  Status refused = ok_status();
  std::vector<Result> results;
  const Status run = run_ep2(vanish, /*comm_timeout=*/1.0, SchedulerOptions{.max_num_seqs = 4},
                             [&](Scheduler& s) {
                               Results r;
                               const char* prompts[] = {"ROMEO:", "JULIET:\nO Romeo", "To be, or not to be"};
                               for (int i = 0; i < 3; ++i) {
                                 auto id = s.submit(greedy_request(prompts[i], 300), r.sink(i));
                                 ASSERT_TRUE(id.ok()) << id.status().message();
                               }
                               for (int i = 0; i < 3; ++i) results.push_back(r.wait(i));
                               // The error events go out as run() fails; it then records the
                               // failure: wait (bounded) for that.
                               for (int i = 0; i < 1000; ++i) {
                                 after = s.health();
                                 if (after.state == "failed") break;
                                 std::this_thread::sleep_for(std::chrono::milliseconds(5));
                               }
                               refused = s.submit(greedy_request("A", 4), [](SeqEvent&&) {}).status();
                             },
                             &worker);
  EXPECT_FALSE(run.ok());
  EXPECT_TRUE(run.code() == StatusCode::kDeadlineExceeded || run.code() == StatusCode::kUnavailable)
      << run.to_string();
  EXPECT_CONTAINS(run.message(), "engine step: ");  // the failed stage, then the communicator's words
  ASSERT_EQ(results.size(), 3u);
  for (const Result& r : results) {
    EXPECT_EQ(r.finish_reason, "error");
    EXPECT_EQ(r.error, run.message());
    EXPECT_LT(r.tokens.size(), 300u);
  }
  EXPECT_EQ(after.state, "failed");
  EXPECT_EQ(after.detail, run.message());
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.to_string();
  EXPECT_CONTAINS(refused.message(), run.message());  // says why, not just "shutting down"
  EXPECT_EQ(worker.code(), StatusCode::kUnavailable) << worker.to_string();  // the vanished rank
}

TEST(SchedulerFaults, SlowPeerIsStalledWhileAStepRunsThenOk) {
  FaultPlan slow;
  slow.delay_seconds = 0.05;  // every exchange of rank 1: a step takes several of them
  SchedulerOptions so;
  so.liveness_timeout_seconds = 0.15;
  Status worker = ok_status();
  bool saw_stalled = false;
  std::string detail;
  double longest_health_call = 0;
  ServiceHealth idle_before, end;
  Result result;
  const Status run = run_ep2(slow, /*comm_timeout=*/10.0, so,
                             [&](Scheduler& s) {
                               idle_before = s.health();
                               Results r;
                               ASSERT_TRUE(s.submit(greedy_request("ROMEO:", 3), r.sink(0)).ok());
                               SystemClock clock;
                               for (int i = 0; i < 2000 && !saw_stalled; ++i) {
                                 const double t0 = clock.now_seconds();
                                 const ServiceHealth h = s.health();
                                 longest_health_call = std::max(longest_health_call, clock.now_seconds() - t0);
                                 if (h.state == "stalled") {
                                   saw_stalled = true;
                                   detail = h.detail;
                                 }
                                 std::this_thread::sleep_for(std::chrono::milliseconds(5));
                               }
                               result = r.wait(0);
                               // The final event comes from inside the last step, which
                               // may still be finishing: wait (bounded) for it to end.
                               for (int i = 0; i < 1000; ++i) {
                                 end = s.health();
                                 if (end.ok()) break;
                                 std::this_thread::sleep_for(std::chrono::milliseconds(5));
                               }
                             },
                             &worker);
  EXPECT_TRUE(run.ok()) << run.to_string();
  EXPECT_TRUE(worker.ok()) << worker.to_string();
  EXPECT_TRUE(idle_before.ok());
  EXPECT_TRUE(saw_stalled);
  EXPECT_CONTAINS(detail, "liveness timeout 0.15 s");
  EXPECT_LT(longest_health_call, 0.05);  // never waits for the step
  EXPECT_EQ(result.finish_reason, "length");
  EXPECT_EQ(result.tokens.size(), 3u);
  EXPECT_TRUE(end.ok()) << end.state << " " << end.detail;
}

TEST(SchedulerFaults, LivenessTimeoutMustBePositive) {
  EngineOptions opts{.model_dir = testing::tiny_model_dir(), .num_threads = 1};
  auto engine = Engine::open(opts);
  ASSERT_TRUE(engine.ok());
  SchedulerOptions so;
  so.liveness_timeout_seconds = 0;
  auto s = Scheduler::create(engine.value().get(), so);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(s.status().message(), "liveness_timeout_seconds");
}

}  // namespace
}  // namespace moe
