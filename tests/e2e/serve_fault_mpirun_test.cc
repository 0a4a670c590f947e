// Level 0 of fault tolerance, end to end: `mpirun [--enable-recovery] -np 2 moe serve
// --ep 2 --comm-timeout 2`, with a streamed and a non-streamed request in flight when rank 1
// dies (SIGKILL) or stops answering (SIGSTOP): the streamed request ends with an SSE
// error event then [DONE], the non-streamed one with a 503 OpenAI error JSON, /health
// says "stalled" while rank 0 waits on the stopped peer, and mpirun exits (non-zero)
// within a bounded time: no rank is left blocked. `moe generate --ep 2` too.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "serve_process.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::ServeProcess;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct StreamOutcome {
  int status = 0;
  int chunks = 0;            // text chunks
  std::string error;         // the error event's message
  bool error_then_done = false;  // the last two events: the error, then [DONE]
};

// A long greedy streamed completion; `started` is set at its first text chunk.
StreamOutcome stream_long(int port, std::atomic<bool>* started) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  const json body = {{"model", "tiny-mixtral-shakespeare"}, {"prompt", "ROMEO:"}, {"max_tokens", 480},
                     {"temperature", 0}, {"ignore_eos", true}, {"stream", true}};
  StreamOutcome out;
  std::string buf;
  std::vector<std::string> events;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      const std::string event = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      events.push_back(event.substr(6));
      const json j = json::parse(events.back(), nullptr, false);
      if (!j.is_discarded() && j.contains("choices")) {
        ++out.chunks;
        started->store(true);
      }
    }
    return true;
  };
  auto res = cli.send(req);
  out.status = res ? res->status : -1;
  if (events.size() >= 2 && events.back() == "[DONE]") {
    const json e = json::parse(events[events.size() - 2], nullptr, false);
    if (!e.is_discarded() && e.contains("error")) {
      out.error = e["error"].value("message", "");
      out.error_then_done = true;
    }
  }
  return out;
}

struct PlainOutcome {
  int status = 0;
  json body;
};

PlainOutcome plain_long(int port) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  const json body = {{"model", "tiny-mixtral-shakespeare"}, {"prompt", "JULIET:"}, {"max_tokens", 480},
                     {"temperature", 0}, {"ignore_eos", true}};
  auto res = cli.Post("/v1/completions", body.dump(), "application/json");
  PlainOutcome out;
  out.status = res ? res->status : -1;
  if (res) out.body = json::parse(res->body, nullptr, false);
  return out;
}

// GET /health: status and body ({} when unreachable).
std::pair<int, json> health(int port) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(2, 0);
  cli.set_connection_timeout(1, 0);
  auto res = cli.Get("/health");
  if (!res) return {-1, json::object()};
  return {res->status, json::parse(res->body, nullptr, false)};
}

void expect_503_json(const PlainOutcome& p) {
  EXPECT_EQ(p.status, 503) << p.body.dump();
  ASSERT_TRUE(p.body.is_object()) << p.body.dump();
  ASSERT_TRUE(p.body.contains("error")) << p.body.dump();
  EXPECT_EQ(p.body["error"]["type"], "service_unavailable") << p.body.dump();
  EXPECT_NE(p.body["error"]["message"].get<std::string>().find("generation failed"), std::string::npos)
      << p.body.dump();
}

const std::vector<std::string> kArgs = {"--ep", "2", "--threads", "1", "--comm-timeout", "2", "--liveness-timeout",
                                        "0.5"};

// With --enable-recovery: plain mpirun reacts to a rank's death by killing the others
// (SIGTERM, SIGKILL a second later), which races rank 0's answers (rank 0 lost 1 run of 8
// here); with it the job lives until rank 0's --comm-timeout fails the step, answers
// every request and ends the job with MPI_Abort (mpirun then exits 0 in that mode).
TEST(ServeFaultMpirun, KilledRankEndsRequestsWithErrorsAndEveryProcessExits) {
  ServeProcess server(kArgs, /*mpirun_np=*/2, "", {"--enable-recovery"});
  ASSERT_GT(server.port(), 0) << server.log();
  const pid_t rank1 = server.rank_pid(1);
  ASSERT_GT(rank1, 0);
  std::atomic<bool> started{false};
  auto streamed = std::async(std::launch::async, [&] { return stream_long(server.port(), &started); });
  auto plain = std::async(std::launch::async, [&] { return plain_long(server.port()); });
  const auto t_wait = Clock::now();
  while (!started && since(t_wait) < 20) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(started) << server.log();
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);

  const StreamOutcome s = streamed.get();
  EXPECT_EQ(s.status, 200);
  EXPECT_GT(s.chunks, 0);
  EXPECT_TRUE(s.error_then_done) << server.log();
  EXPECT_NE(s.error.find("generation failed"), std::string::npos) << s.error;
  expect_503_json(plain.get());
  const int code = server.wait_exit(15 - since(t0));
  EXPECT_NE(code, -1) << "mpirun still running " << since(t0) << " s after the kill\n" << server.log();
  EXPECT_LT(since(t0), 15.0);
  EXPECT_NE(server.log().find("the expert-parallel group failed"), std::string::npos) << server.log();
}

TEST(ServeFaultMpirun, StoppedRankIsStalledThenRequestsErrorAndEveryProcessExits) {
  ServeProcess server(kArgs, /*mpirun_np=*/2);
  ASSERT_GT(server.port(), 0) << server.log();
  const pid_t rank1 = server.rank_pid(1);
  ASSERT_GT(rank1, 0);
  EXPECT_EQ(health(server.port()).first, 200);
  std::atomic<bool> started{false};
  auto streamed = std::async(std::launch::async, [&] { return stream_long(server.port(), &started); });
  auto plain = std::async(std::launch::async, [&] { return plain_long(server.port()); });
  const auto t_wait = Clock::now();
  while (!started && since(t_wait) < 20) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(started) << server.log();
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(rank1, SIGSTOP), 0);

  // Within the comm timeout (2 s), past the liveness timeout (0.5 s): "stalled".
  bool stalled = false;
  std::string detail;
  while (!stalled && since(t0) < 5) {
    auto [status, body] = health(server.port());
    if (status == 503 && body.is_object() && body.value("status", "") == "stalled") {
      stalled = true;
      detail = body.value("detail", "");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(stalled) << server.log();
  EXPECT_NE(detail.find("running for"), std::string::npos) << detail;

  const StreamOutcome s = streamed.get();
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.error_then_done) << server.log();
  expect_503_json(plain.get());
  const int code = server.wait_exit(15 - since(t0));
  EXPECT_NE(code, -1) << "mpirun still running " << since(t0) << " s after the stop\n" << server.log();
  EXPECT_NE(code, 0);
  EXPECT_LT(since(t0), 15.0);
  // The stopped rank must not outlive the test.
  if (::kill(rank1, 0) == 0) {
    ::kill(rank1, SIGKILL);
    ::kill(rank1, SIGCONT);
  }
}

// `moe generate --ep 2` the same way: rank 1 stopped mid-generation; rank 0 fails the
// step after --comm-timeout, names it, and the job ends (no rank left in MPI_Finalize).
TEST(ServeFaultMpirun, GenerateWithAStoppedRankExitsWithinTheTimeout) {
  const std::string out = ::testing::TempDir() + "/generate_fault_out.txt";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    const std::string bin = testing::moe_binary();
    execlp("mpirun", "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", bin.c_str(), "generate", "--ep",
           "2", "--threads", "1", "--comm-timeout", "2", "--max-tokens", "480", "--temperature", "0", "--prompt",
           "ROMEO:", static_cast<char*>(nullptr));
    _exit(127);
  }
  struct Reap {
    pid_t pid;
    ~Reap() {
      if (pid > 0) {
        kill(-pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reap{pid};
  // Wait for generated text (past the prompt), then stop rank 1.
  const auto t_wait = Clock::now();
  while (testing::read_file(out).size() < 40 && since(t_wait) < 30) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(testing::read_file(out).size(), 40u) << testing::read_file(out);
  pid_t rank1 = -1;
  {
    std::ifstream children("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
    pid_t child;
    while (rank1 < 0 && children >> child) {
      std::ifstream env("/proc/" + std::to_string(child) + "/environ", std::ios::binary);
      std::string var;
      while (std::getline(env, var, '\0')) {
        if (var == "OMPI_COMM_WORLD_RANK=1") rank1 = child;
      }
    }
  }
  ASSERT_GT(rank1, 0);
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(rank1, SIGSTOP), 0);
  int status = 0;
  bool exited = false;
  while (!exited && since(t0) < 15) {
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string log = testing::read_file(out);
  EXPECT_TRUE(exited) << "mpirun still running " << since(t0) << " s after the stop\n" << log;
  if (exited) {
    reap.pid = -1;
    EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  }
  EXPECT_NE(log.find("the expert-parallel group failed"), std::string::npos) << log;
  EXPECT_NE(log.find("timed out after 2 s"), std::string::npos) << log;
  if (::kill(rank1, 0) == 0) {
    ::kill(rank1, SIGKILL);
    ::kill(rank1, SIGCONT);
  }
  std::remove(out.c_str());
}

}  // namespace
}  // namespace moe
