// Engine::open with adaptive top-k (EngineOptions::adaptive_k / min_k / max_k /
// adaptive_k_target): contradictions refused by name, and a run whose load statistics
// count the shed assignments.
#include <gtest/gtest.h>

#include "contains_util.h"
#include <condition_variable>
#include <mutex>
#include <thread>

#include "moe/engine.h"
#include "moe/scheduler.h"
#include "moe/stats/expert_load_stats.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

EngineOptions tiny() { return {.model_dir = testing::tiny_model_dir(), .num_threads = 1}; }

std::string open_error(const EngineOptions& o) {
  auto e = Engine::open(o);
  EXPECT_FALSE(e.ok());
  if (e.ok()) return "";
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  return e.status().message();
}

TEST(AdaptiveKEngineTest, ContradictionsAreRefusedByName) {
  EngineOptions o = tiny();
  o.min_k = 1;  // without adaptive_k: would be ignored
  EXPECT_CONTAINS(open_error(o), "min_k is set but adaptive_k is off");
  o = tiny();
  o.adaptive_k_target = 0.5;
  EXPECT_CONTAINS(open_error(o), "adaptive_k_target is set but adaptive_k is off");
  o = tiny();
  o.adaptive_k = true;
  o.max_k = 3;  // the tiny model routes top-2
  EXPECT_CONTAINS(open_error(o), "max_k 3 exceeds the model's experts per token (2)");
  o.max_k = 1;
  o.min_k = 2;
  EXPECT_CONTAINS(open_error(o), "min_k 2 exceeds max_k 1");
  o = tiny();
  o.adaptive_k = true;
  o.adaptive_k_target = -1;
  EXPECT_CONTAINS(open_error(o), "load target factor");
  o = tiny();
  o.overflow_policy = "spill";
  EXPECT_CONTAINS(open_error(o), "adaptive_requeue");  // the list of valid policies names it
}

TEST(AdaptiveKEngineTest, ShedAssignmentsAreCounted) {
  EngineOptions o = tiny();
  o.adaptive_k = true;
  o.adaptive_k_target = 0.5;  // half the mean load: some expert is always over it
  o.overflow_policy = "adaptive_requeue";
  o.capacity_factor = 0.9;
  auto e = Engine::open(o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  GenerateRequest req;
  req.prompt = "ROMEO:\nWhat light through yonder window breaks?";
  req.max_tokens = 4;
  req.sampling.temperature = 0;
  auto r = e.value()->generate(req);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ExpertLoadStats& st = e.value()->expert_load_stats();
  int64_t shed = 0, assignments = 0;
  for (int l : st.layer_ids()) {
    shed += st.adaptive_dropped(l);
    assignments += st.total_tokens(l);
    // Top-2 with min_k 1: a token can shed only its slot 1.
    EXPECT_EQ(st.adaptive_tokens(l), st.adaptive_dropped(l));
  }
  EXPECT_GT(shed, 0);
  // Every routed token-layer holds 2 assignments, less those shed and dropped.
  // (The last generated token is never run through the model.)
  const int64_t forwarded = static_cast<int64_t>(r.value().prompt_token_ids.size() + r.value().output_token_ids.size()) - 1;
  const int64_t token_layers = forwarded * st.num_layers();
  int64_t dropped = 0;
  for (int l : st.layer_ids()) dropped += st.dropped(l);
  EXPECT_EQ(assignments, 2 * token_layers - shed - dropped);
  EXPECT_CONTAINS(st.to_json_string(), "\"adaptive_dropped\"");
}

// The Scheduler's snapshot (what /metrics renders) carries the same totals.
TEST(AdaptiveKEngineTest, SchedulerSnapshotCarriesTheCounters) {
  EngineOptions o = tiny();
  o.adaptive_k = true;
  o.adaptive_k_target = 0.5;
  o.overflow_policy = "adaptive_requeue";
  o.capacity_factor = 0.6;
  auto e = Engine::open(o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto sched = Scheduler::create(e.value().get(), SchedulerOptions{}).value();
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  for (int i = 0; i < 2; ++i) {
    SeqRequest r;
    r.prompt = i == 0 ? "ROMEO:\nWhat light through yonder window breaks?" : "JULIET:\nO Romeo, Romeo!";
    r.max_tokens = 3;
    r.sampling.temperature = 0;
    ASSERT_TRUE(sched->submit(r, [&](SeqEvent&& ev) {
                        if (!ev.finished) return;
                        std::lock_guard<std::mutex> lock(mu);
                        ++done;
                        cv.notify_all();
                      }).ok());
  }
  std::thread stopper([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == 2; });
    sched->shutdown(0);
  });
  ASSERT_TRUE(sched->run().ok());
  stopper.join();
  const ExpertLoadStats& st = e.value()->expert_load_stats();
  int64_t tokens = 0, shed = 0, requeued = 0;
  for (int l : st.layer_ids()) {
    tokens += st.adaptive_tokens(l);
    shed += st.adaptive_dropped(l);
    requeued += st.requeued(l);
  }
  const ServiceSnapshot snap = sched->snapshot();
  EXPECT_GT(snap.adaptive_k_shed, 0);
  EXPECT_EQ(snap.adaptive_k_tokens, tokens);
  EXPECT_EQ(snap.adaptive_k_shed, shed);
  EXPECT_EQ(snap.requeued, requeued);
}

}  // namespace
}  // namespace moe
