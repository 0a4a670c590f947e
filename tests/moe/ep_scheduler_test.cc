// Continuous batching under expert parallelism, ranks as threads: rank 0 runs the
// Scheduler, the other ranks Engine::run_worker() (joining every step with no tokens).
// Many requests batched together give the same greedy tokens as each alone on one
// process, with flat and hierarchical all-to-all, including idle gaps longer than the
// idle heartbeat would allow without it.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "moe/comm/inproc_communicator.h"
#include "moe/engine.h"
#include "moe/scheduler.h"
#include "test_util.h"

namespace moe {
namespace {

const std::vector<std::string> kPrompts = {
    "ROMEO:", "First Citizen:\nBefore we proceed any further, hear me speak.", "JULIET:\nO Romeo, Romeo!",
    "To be, or not to be", "KING HENRY IV:\nSo shaken as we are, so wan with care,", "A", "LADY MACBETH:\nOut,",
    "GLOUCESTER:\nNow is the winter of our discontent"};

std::vector<std::vector<int>> alone_single_process() {
  auto engine = Engine::open({.model_dir = testing::tiny_model_dir(), .num_threads = 1, .batch_invariant = true});
  EXPECT_TRUE(engine.ok());
  std::vector<std::vector<int>> out;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    GenerateRequest g{.prompt = kPrompts[i], .max_tokens = 10 + static_cast<int>(i) * 2};
    g.sampling.temperature = 0;
    g.ignore_eos = true;
    auto r = (*engine)->generate(g);
    EXPECT_TRUE(r.ok());
    out.push_back(r->output_token_ids);
  }
  return out;
}

class EpScheduler : public ::testing::TestWithParam<std::pair<int, int>> {};  // ranks, ranks per node

TEST_P(EpScheduler, BatchedRequestsMatchSingleProcess) {
  const auto [ranks, per_node] = GetParam();
  const auto expected = alone_single_process();
  // A 2 s communicator timeout, and the client pauses 3 s between requests: the idle
  // workers survive only through the scheduler's heartbeat.
  InProcessGroup group(ranks, per_node, 2.0);
  std::mutex mu;
  std::condition_variable cv;
  std::map<size_t, std::vector<int>> got;
  std::map<size_t, bool> done;
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    EngineOptions opts{.model_dir = testing::tiny_model_dir(), .num_threads = 1, .comm = &comm};
    opts.batch_invariant = true;
    MOE_ASSIGN_OR_RETURN(auto engine, Engine::open(opts));
    if (comm.rank() != 0) return engine->run_worker();
    SchedulerOptions so;
    so.max_num_seqs = 8;
    so.max_num_batched_tokens = 16;  // chunked prefill next to decodes
    so.idle_heartbeat_seconds = 0.25;
    MOE_ASSIGN_OR_RETURN(auto sched, Scheduler::create(engine.get(), so));
    std::thread client([&] {
      for (size_t i = 0; i < kPrompts.size(); ++i) {
        if (i == kPrompts.size() - 1) {  // idle for longer than the timeout, then one more
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return done.size() == kPrompts.size() - 1; });
          lock.unlock();
          std::this_thread::sleep_for(std::chrono::seconds(3));
        }
        SeqRequest r;
        r.prompt = kPrompts[i];
        r.max_tokens = 10 + static_cast<int>(i) * 2;
        r.sampling.temperature = 0;
        r.ignore_eos = true;
        auto id = sched->submit(r, [&, i](SeqEvent&& ev) {
          std::lock_guard<std::mutex> lock(mu);
          got[i].insert(got[i].end(), ev.token_ids.begin(), ev.token_ids.end());
          if (ev.finished) {
            done[i] = true;
            cv.notify_all();
          }
        });
        EXPECT_TRUE(id.ok());
      }
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done.size() == kPrompts.size(); });
      lock.unlock();
      sched->shutdown(0);
    });
    Status run = sched->run();
    client.join();
    MOE_RETURN_IF_ERROR(run);
    return engine->stop_workers();
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(got[i], expected[i]) << kPrompts[i];
}

INSTANTIATE_TEST_SUITE_P(Ranks, EpScheduler,
                         ::testing::Values(std::pair{2, 0}, std::pair{4, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.first) + "ranks_rpn" + std::to_string(info.param.second);
                         });

}  // namespace
}  // namespace moe
