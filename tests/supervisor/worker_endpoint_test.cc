// The worker side: the endpoint's routes and refusals, a /submit stream whose
// supervisor went away cancels its request, stop() cuts streams like a dying process,
// and SupervisorWatch notices a dead (or zombie) supervisor.
#include "moe/supervisor/worker_endpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "moe/supervisor/worker_client.h"
#include "moe/supervisor/worker_protocol.h"
#include "supervisor/fake_worker.h"

extern char** environ;

namespace moe::supervisor {
namespace {

using testing::ResumableFake;

template <typename Pred>
bool eventually(Pred pred, double seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

TEST(WorkerEndpointTest, AnswersControlRoutes) {
  ResumableFake fake;
  WorkerEndpoint ep(fake);
  ASSERT_TRUE(ep.start().ok());
  WorkerClient c(ep.port(), 2);
  auto info = c.model_info();
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info.value().model_dir, "/models/fake");
  EXPECT_EQ(info.value().max_context, 256);
  auto n = c.count_tokens("hello");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value(), 6);
  auto h = c.health();
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h.value().state, "ok");
  fake.report_stalled = true;
  EXPECT_EQ(c.health().value().state, "stalled");
  auto s = c.snapshot();
  ASSERT_TRUE(s.ok());
  EXPECT_GE(s.value().generation_tokens_total, 1000);
  httplib::Client raw("127.0.0.1", ep.port());
  EXPECT_EQ(raw.Post("/cancel", "{}", "application/json")->status, 400);
  EXPECT_EQ(raw.Post("/count_tokens", "[]", "application/json")->status, 400);
}

TEST(WorkerEndpointTest, SubmitRefusalsComeAsTheReplyLine) {
  ResumableFake fake;
  WorkerEndpoint ep(fake);
  ASSERT_TRUE(ep.start().ok());
  httplib::Client raw("127.0.0.1", ep.port());
  auto malformed = raw.Post("/submit", "{\"max_tokens\":\"x\"}", "application/json");
  ASSERT_TRUE(malformed);
  auto reply = decode_submit_reply(malformed->body.substr(0, malformed->body.find('\n')));
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply.value().status().code(), StatusCode::kInvalidArgument);
  SeqRequest bad;
  bad.prompt = "BAD one";
  auto refused = raw.Post("/submit", encode_request(bad), "application/json");
  ASSERT_TRUE(refused);
  reply = decode_submit_reply(refused->body.substr(0, refused->body.find('\n')));
  ASSERT_TRUE(reply.ok());
  EXPECT_NE(reply.value().status().message().find("bad prompt"), std::string::npos);
}

TEST(WorkerEndpointTest, StreamsEventsToTheFinalOne) {
  ResumableFake fake;
  WorkerEndpoint ep(fake);
  ASSERT_TRUE(ep.start().ok());
  SeqRequest r;
  r.prompt = "ROMEO:";
  r.max_tokens = 5;
  r.resume_token_ids = {testing::expected_token("ROMEO:", 0, 0), testing::expected_token("ROMEO:", 0, 1)};
  SubmitStream stream(ep.port(), 2);
  std::vector<int> tokens;
  std::optional<uint64_t> id;
  const Status st = stream.run(
      r,
      [&](const StatusOr<uint64_t>& reply) {
        if (reply.ok()) id = reply.value();
        return reply.ok();
      },
      [&](SeqEvent&& e) {
        tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
        return true;
      });
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(id.has_value());
  std::vector<int> want;
  for (int i = 2; i < 5; ++i) want.push_back(testing::expected_token("ROMEO:", 0, i));
  EXPECT_EQ(tokens, want);  // the fake resumed after the two given tokens
}

TEST(WorkerEndpointTest, DroppedSupervisorConnectionCancelsTheRequest) {
  ResumableFake fake;
  WorkerEndpoint ep(fake);
  ASSERT_TRUE(ep.start().ok());
  SeqRequest r;
  r.prompt = "ROMEO:";
  r.max_tokens = 200;
  SubmitStream stream(ep.port(), 2);
  std::atomic<int> events{0};
  std::thread t([&] {
    (void)stream.run(r, [](const StatusOr<uint64_t>&) { return true; },
                     [&](SeqEvent&&) {
                       ++events;
                       return true;
                     });
  });
  ASSERT_TRUE(eventually([&] { return events >= 2; }));
  stream.abort();
  t.join();
  EXPECT_TRUE(eventually([&] { return fake.cancels() == 1; }));
  EXPECT_TRUE(eventually([&] { return ep.open_streams() == 0; }));
}

TEST(WorkerEndpointTest, StopCutsOpenStreamsWithoutAFinalEvent) {
  ResumableFake fake;
  WorkerEndpoint ep(fake);
  ASSERT_TRUE(ep.start().ok());
  fake.hold = true;  // no events: the stream waits
  SeqRequest r;
  r.prompt = "ROMEO:";
  r.max_tokens = 10;
  SubmitStream stream(ep.port(), 2);
  std::atomic<bool> replied{false};
  Status st;
  std::thread t([&] {
    st = stream.run(r,
                    [&](const StatusOr<uint64_t>& reply) {
                      replied = reply.ok();
                      return true;
                    },
                    [](SeqEvent&&) { return true; });
  });
  ASSERT_TRUE(eventually([&] { return replied.load(); }));
  ep.stop();
  t.join();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("cut"), std::string::npos) << st.message();
}

TEST(SupervisorWatchTest, NoticesAGoneSupervisorAndAZombie) {
  pid_t pid = -1;
  char sleep_cmd[] = "sleep", arg[] = "100";
  char* argv[] = {sleep_cmd, arg, nullptr};
  ASSERT_EQ(posix_spawnp(&pid, "sleep", nullptr, nullptr, argv, environ), 0);
  EXPECT_TRUE(process_alive(pid));
  std::atomic<bool> gone{false};
  {
    SupervisorWatch watch(pid, 10, [&] { gone = true; });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(gone);
    ::kill(pid, SIGKILL);  // not reaped yet: a zombie counts as gone
    EXPECT_TRUE(eventually([&] { return gone.load(); }, 5));
  }
  EXPECT_FALSE(process_alive(pid));
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(process_alive(pid));
  EXPECT_FALSE(process_alive(0));
  EXPECT_TRUE(process_alive(::getpid()));
}

}  // namespace
}  // namespace moe::supervisor
