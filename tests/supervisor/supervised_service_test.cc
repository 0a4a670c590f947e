// SupervisedService against in-process fake worker groups (fake_worker.h): a group that
// dies, goes silent, reports a stall or an engine error mid-stream must be invisible to
// the client (one continuous stream equal to the fault-free output); what cannot be
// resumed in time ends with an error event, never a hang; bad input is not retried.
#include "moe/supervisor/supervised_service.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "supervisor/fake_worker.h"

namespace moe::supervisor {
namespace {

using testing::expected_token;
using testing::FakeLauncher;
using testing::token_text;
using Clock = std::chrono::steady_clock;

template <typename Pred>
bool eventually(Pred pred, double seconds = 10) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

// What a client receives for one request.
struct Collector {
  std::mutex mu;
  std::vector<int> tokens;
  std::string text;
  int finals = 0;
  int events_after_final = 0;
  SeqEvent final_event;

  SeqSink sink() {
    return [this](SeqEvent&& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (finals > 0) ++events_after_final;
      tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
      text += e.text;
      if (e.finished) {
        ++finals;
        final_event = e;
      }
    };
  }
  size_t num_tokens() {
    std::lock_guard<std::mutex> lock(mu);
    return tokens.size();
  }
  bool finished() {
    std::lock_guard<std::mutex> lock(mu);
    return finals > 0;
  }
};

SeqRequest make_request(const std::string& prompt, int max_tokens, float temperature = 0,
                        std::optional<uint64_t> seed = std::nullopt) {
  SeqRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

// The fault-free output of `r` (given the seed the worker saw).
void expect_complete(Collector& c, const std::string& prompt, uint64_t seed, int max_tokens) {
  std::lock_guard<std::mutex> lock(c.mu);
  std::vector<int> want;
  std::string want_text;
  for (int i = 0; i < max_tokens; ++i) {
    want.push_back(expected_token(prompt, seed, i));
    want_text += token_text(want.back());
  }
  EXPECT_EQ(c.tokens, want) << prompt;
  EXPECT_EQ(c.text, want_text) << prompt;
  EXPECT_EQ(c.finals, 1);
  EXPECT_EQ(c.events_after_final, 0);
  EXPECT_EQ(c.final_event.finish_reason, "length") << c.final_event.error;
  EXPECT_EQ(c.final_event.error, "");
}

SupervisorOptions fast_options() {
  SupervisorOptions o;
  o.liveness_timeout_seconds = 1;
  o.probe_interval_seconds = 0.05;
  o.recovery_timeout_seconds = 10;
  o.max_restarts = 3;
  o.startup_timeout_seconds = 5;
  o.control_timeout_seconds = 2;
  return o;
}

class SupervisedServiceTest : public ::testing::Test {
 protected:
  void start(SupervisorOptions o = fast_options()) {
    auto s = SupervisedService::start(launcher_, o);
    ASSERT_TRUE(s.ok()) << s.status().message();
    service_ = std::move(s).value();
  }
  uint64_t submit(const SeqRequest& r, Collector& c) {
    auto id = service_->submit(r, c.sink());
    EXPECT_TRUE(id.ok()) << id.status().message();
    return id.ok() ? id.value() : 0;
  }

  FakeLauncher launcher_{3};
  std::unique_ptr<SupervisedService> service_;
};

TEST_F(SupervisedServiceTest, ServesLikeTheWorkerWhenNothingFails) {
  start();
  Collector a, b;
  submit(make_request("ROMEO:", 20), a);
  submit(make_request("JULIET:", 7, 0.8f, 5), b);
  ASSERT_TRUE(eventually([&] { return a.finished() && b.finished(); }));
  expect_complete(a, "ROMEO:", 0, 20);
  expect_complete(b, "JULIET:", 5, 7);
  const ServiceSnapshot s = service_->snapshot();
  EXPECT_EQ(s.worker_failures, 0);
  EXPECT_EQ(s.recoveries, 0);
  EXPECT_GT(s.generation_tokens_total, 1000);  // the worker's counters come through
  const ServiceHealth h = service_->health();
  EXPECT_EQ(h.state, "ok");
  EXPECT_EQ(h.worker_pids, (std::vector<int64_t>{::getpid(), 4242}));
  EXPECT_EQ(service_->model_info().model_dir, "/models/fake");
  EXPECT_EQ(service_->count_tokens("abcd"), 5);
  EXPECT_EQ(launcher_.launches(), 1);
}

TEST_F(SupervisedServiceTest, GroupDeathMidStreamIsInvisibleToTheClient) {
  start();
  Collector greedy, seeded, unseeded;
  submit(make_request("ROMEO:", 60), greedy);
  submit(make_request("HAMLET:", 50, 0.8f, 1234), seeded);
  submit(make_request("MACBETH:", 40, 0.7f), unseeded);  // the supervisor picks its seed
  ASSERT_TRUE(eventually([&] { return greedy.num_tokens() >= 5; }));
  launcher_.group(0)->crash();
  ASSERT_TRUE(eventually([&] { return greedy.finished() && seeded.finished() && unseeded.finished(); }));

  // The unseeded request got one seed, the same on both groups.
  std::optional<uint64_t> seed0, seed1;
  for (const SeqRequest& r : launcher_.group(0)->fake.requests_seen()) {
    if (r.prompt == "MACBETH:") seed0 = r.sampling.seed;
  }
  ASSERT_NE(launcher_.group(1), nullptr);
  std::vector<size_t> resumed;
  size_t greedy_resumed = 0;
  for (const SeqRequest& r : launcher_.group(1)->fake.requests_seen()) {
    if (r.prompt == "MACBETH:") seed1 = r.sampling.seed;
    if (r.prompt == "ROMEO:") greedy_resumed = r.resume_token_ids.size();
    resumed.push_back(r.resume_token_ids.size());
  }
  ASSERT_TRUE(seed0.has_value());
  EXPECT_EQ(seed0, seed1);
  expect_complete(greedy, "ROMEO:", 0, 60);
  expect_complete(seeded, "HAMLET:", 1234, 50);
  expect_complete(unseeded, "MACBETH:", *seed0, 40);
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_GE(greedy_resumed, 5u);  // continued from what the client had, not from scratch

  const ServiceSnapshot s = service_->snapshot();
  EXPECT_EQ(s.worker_failures, 1);
  EXPECT_EQ(s.recoveries, 1);
  EXPECT_EQ(s.replayed_requests, 3);
  ASSERT_EQ(s.recovery_seconds.size(), 1u);
  EXPECT_GT(s.recovery_seconds[0], 0);
  EXPECT_LT(s.recovery_seconds[0], 5);
  EXPECT_EQ(launcher_.launches(), 2);
  EXPECT_EQ(service_->health().state, "ok");
}

TEST_F(SupervisedServiceTest, EngineErrorEventIsAGroupFailureNotAClientError) {
  start();
  Collector c;
  submit(make_request("KING LEAR:", 30), c);
  ASSERT_TRUE(eventually([&] { return c.num_tokens() >= 3; }));
  launcher_.group(0)->fake.fail_steps = true;
  ASSERT_TRUE(eventually([&] { return c.finished(); }));
  expect_complete(c, "KING LEAR:", 0, 30);
  EXPECT_EQ(service_->snapshot().worker_failures, 1);
}

TEST_F(SupervisedServiceTest, SilentGroupIsDeclaredFailedAfterTheLivenessTimeout) {
  SupervisorOptions o = fast_options();
  o.liveness_timeout_seconds = 0.3;
  start(o);
  Collector c;
  submit(make_request("OTHELLO:", 30), c);
  ASSERT_TRUE(eventually([&] { return c.num_tokens() >= 3; }));
  const auto frozen_at = Clock::now();
  launcher_.group(0)->fake.frozen = true;  // no steps, /health does not answer
  ASSERT_TRUE(eventually([&] { return service_->snapshot().worker_failures == 1; }));
  const double detected = std::chrono::duration<double>(Clock::now() - frozen_at).count();
  EXPECT_GE(detected, 0.25);
  EXPECT_LT(detected, 3.0);
  ASSERT_TRUE(eventually([&] { return c.finished(); }));
  expect_complete(c, "OTHELLO:", 0, 30);
}

TEST_F(SupervisedServiceTest, StalledHealthIsAGroupFailure) {
  start();
  Collector c;
  submit(make_request("PORTIA:", 30), c);
  ASSERT_TRUE(eventually([&] { return c.num_tokens() >= 3; }));
  launcher_.group(0)->fake.hold = true;
  launcher_.group(0)->fake.report_stalled = true;
  ASSERT_TRUE(eventually([&] { return c.finished(); }));
  expect_complete(c, "PORTIA:", 0, 30);
  EXPECT_EQ(service_->snapshot().worker_failures, 1);
}

TEST_F(SupervisedServiceTest, RequestNotResumedWithinTheRecoveryTimeoutGetsAnError) {
  SupervisorOptions o = fast_options();
  o.recovery_timeout_seconds = 0.3;
  o.max_restarts = 1000;
  start(o);
  launcher_.fail_from = 2;  // no group starts again
  Collector c;
  submit(make_request("BRUTUS:", 200), c);
  ASSERT_TRUE(eventually([&] { return c.num_tokens() >= 3; }));
  const auto crashed_at = Clock::now();
  launcher_.group(0)->crash();
  ASSERT_TRUE(eventually([&] { return c.finished(); }, 5));
  const double took = std::chrono::duration<double>(Clock::now() - crashed_at).count();
  EXPECT_LT(took, 3.0);
  std::lock_guard<std::mutex> lock(c.mu);
  EXPECT_EQ(c.finals, 1);
  EXPECT_EQ(c.final_event.finish_reason, "error");
  EXPECT_NE(c.final_event.error.find("could not be resumed within"), std::string::npos) << c.final_event.error;
  // What the client got before is the true prefix.
  for (size_t i = 0; i < c.tokens.size(); ++i) EXPECT_EQ(c.tokens[i], expected_token("BRUTUS:", 0, static_cast<int>(i)));
  EXPECT_EQ(c.final_event.completion_tokens, static_cast<int>(c.tokens.size()));
}

TEST_F(SupervisedServiceTest, GivesUpAfterMaxRestartsFailedStarts) {
  SupervisorOptions o = fast_options();
  o.max_restarts = 2;
  start(o);
  launcher_.fail_from = 2;
  Collector c;
  submit(make_request("BRUTUS:", 200), c);
  ASSERT_TRUE(eventually([&] { return c.num_tokens() >= 1; }));
  auto run = std::async(std::launch::async, [&] { return service_->run(); });
  launcher_.group(0)->crash();
  ASSERT_EQ(run.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const Status st = run.get();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("could not be restarted (2 tries"), std::string::npos) << st.message();
  EXPECT_EQ(launcher_.launches(), 3);
  EXPECT_EQ(service_->health().state, "failed");
  ASSERT_TRUE(c.finished());
  EXPECT_EQ(c.final_event.finish_reason, "error");
  Collector late;
  EXPECT_EQ(service_->submit(make_request("X", 3), late.sink()).status().code(), StatusCode::kUnavailable);
}

TEST_F(SupervisedServiceTest, BadInputIsRefusedAndNotRetried) {
  start();
  Collector c;
  auto id = service_->submit(make_request("BAD prompt", 5), c.sink());
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("bad prompt"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(c.finished());  // the sink of a refused request is never called
  EXPECT_EQ(launcher_.launches(), 1);
  EXPECT_EQ(service_->snapshot().worker_failures, 0);
  EXPECT_EQ(service_->health().state, "ok");
}

TEST_F(SupervisedServiceTest, ReplayRefusedAsInvalidEndsWithAnErrorAndNoFurtherRestarts) {
  start();
  Collector c;
  submit(make_request("PORTIA:", 100), c);
  ASSERT_TRUE(eventually([&] { return c.num_tokens() >= 3; }));
  launcher_.reject_resume = true;
  launcher_.group(0)->crash();
  ASSERT_TRUE(eventually([&] { return c.finished(); }));
  EXPECT_EQ(c.final_event.finish_reason, "error");
  EXPECT_NE(c.final_event.error.find("resume refused"), std::string::npos) << c.final_event.error;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(launcher_.launches(), 2);
  EXPECT_EQ(service_->snapshot().worker_failures, 1);
}

TEST_F(SupervisedServiceTest, CancelEndsTheStreamAndReachesTheWorker) {
  start();
  Collector c;
  const uint64_t id = submit(make_request("ROMEO:", 200), c);
  ASSERT_TRUE(eventually([&] { return c.num_tokens() >= 2; }));
  service_->cancel(id);
  ASSERT_TRUE(c.finished());
  EXPECT_EQ(c.final_event.finish_reason, "abort");
  EXPECT_TRUE(eventually([&] { return launcher_.group(0)->fake.cancels() == 1; }));
  EXPECT_TRUE(eventually([&] { return launcher_.group(0)->endpoint.open_streams() == 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::lock_guard<std::mutex> lock(c.mu);
  EXPECT_EQ(c.finals, 1);
  EXPECT_EQ(c.events_after_final, 0);
  EXPECT_EQ(service_->snapshot().worker_failures, 0);  // a cancel is no failure
}

TEST_F(SupervisedServiceTest, RecoveringWhileDownAcceptsRequestsAndResumesThem) {
  start();
  Collector before, during;
  submit(make_request("JULIET:", 40), before);
  ASSERT_TRUE(eventually([&] { return before.num_tokens() >= 2; }));
  launcher_.block_launches = true;
  launcher_.group(0)->crash();
  ASSERT_TRUE(eventually([&] { return service_->health().state == "recovering"; }));
  const ServiceHealth h = service_->health();
  EXPECT_NE(h.detail.find("the worker group failed"), std::string::npos) << h.detail;
  EXPECT_TRUE(h.worker_pids.empty());
  submit(make_request("HAMLET:", 10), during);  // accepted and kept
  const ServiceSnapshot s = service_->snapshot();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 2);
  EXPECT_EQ(s.worker_failures, 1);
  launcher_.block_launches = false;
  ASSERT_TRUE(eventually([&] { return before.finished() && during.finished(); }));
  expect_complete(before, "JULIET:", 0, 40);
  expect_complete(during, "HAMLET:", 0, 10);
  EXPECT_EQ(service_->health().state, "ok");
  // JULIET is replayed. HAMLET normally waits for the new group (never sent before),
  // but under load its first attempt can reach the dying group and be replayed too
  // (seen once under ASan in CI-like load): 1 or 2, never 0.
  const int64_t replayed = service_->snapshot().replayed_requests;
  EXPECT_GE(replayed, 1);
  EXPECT_LE(replayed, 2);
}

TEST_F(SupervisedServiceTest, ShutdownStopsAdmittingAndRunReturnsOnceRequestsFinish) {
  start();
  Collector c;
  submit(make_request("ROMEO:", 30), c);
  service_->shutdown(10);
  Collector late;
  EXPECT_EQ(service_->submit(make_request("X", 3), late.sink()).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(service_->run().ok());
  expect_complete(c, "ROMEO:", 0, 30);
}

TEST_F(SupervisedServiceTest, ShutdownGraceAbortsWhatIsLeft) {
  start();
  Collector c;
  submit(make_request("ROMEO:", 200), c);
  launcher_.group(0)->fake.hold = true;
  service_->shutdown(0.05);
  EXPECT_TRUE(service_->run().ok());
  ASSERT_TRUE(c.finished());
  EXPECT_EQ(c.final_event.finish_reason, "abort");
}

TEST(SupervisedServiceStartTest, FirstGroupFailingToStartIsAnError) {
  FakeLauncher launcher;
  launcher.fail_from = 1;
  auto s = SupervisedService::start(launcher, fast_options());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("injected start failure"), std::string::npos);
}

TEST(SupervisedServiceStartTest, BadOptionsAreRefusedByName) {
  FakeLauncher launcher;
  SupervisorOptions o = fast_options();
  o.max_restarts = 0;
  auto s = SupervisedService::start(launcher, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("max restarts"), std::string::npos);
  o = fast_options();
  o.liveness_timeout_seconds = 0;
  EXPECT_EQ(SupervisedService::start(launcher, o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(launcher.launches(), 0);
}

}  // namespace
}  // namespace moe::supervisor
