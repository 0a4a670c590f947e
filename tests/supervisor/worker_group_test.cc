// ProcessLauncher with a stand-in worker (a python3 script that plays `moe serve
// --worker-endpoint`): it finds the endpoint and rank pids, copies the output prefixed,
// reports how a group ended, and never leaves a process behind (start-up failure,
// deadline, cancel, kill of the whole process group).
#include "moe/supervisor/worker_group.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "moe/supervisor/worker_endpoint.h"
#include "test_util.h"

namespace moe::supervisor {
namespace {

// argv: --worker-endpoint DIR --supervisor-pid PID MODE
constexpr const char* kFakeWorker = R"(import http.server, json, os, subprocess, sys, time
d = sys.argv[sys.argv.index('--worker-endpoint') + 1]
mode = sys.argv[-1]
def publish(name, text):
    with open(d + '/' + name + '.tmp', 'w') as f:
        f.write(text)
    os.rename(d + '/' + name + '.tmp', d + '/' + name)
publish('rank-0.pid', str(os.getpid()))
if mode == 'fail':
    print('error: no model here', flush=True)
    sys.exit(3)
if mode == 'hang':
    time.sleep(1000)
child = subprocess.Popen(['sleep', '1000'])
publish('child.pid', str(child.pid))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({'state': 'ok', 'detail': ''}).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
srv = http.server.HTTPServer(('127.0.0.1', 0), H)
print('fake worker up', flush=True)
publish('endpoint.json', json.dumps({'port': srv.server_address[1], 'pid': os.getpid()}))
srv.serve_forever()
)";

class WorkerGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = moe::testing::make_temp_dir("worker_group");
    moe::testing::write_file(dir_ + "/fake_worker.py", kFakeWorker);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  WorkerGroupOptions options(const std::string& mode) {
    WorkerGroupOptions o;
    o.command = {"python3", dir_ + "/fake_worker.py"};
    o.args = {mode};
    o.num_ranks = 1;
    o.work_dir = dir_;
    return o;
  }
  // The pid the stand-in wrote in its (only) rendezvous directory.
  pid_t written_pid(const std::string& file) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
      if (e.path().filename() == file) {
        std::ifstream in(e.path());
        pid_t pid = -1;
        in >> pid;
        return pid;
      }
    }
    return -1;
  }
  std::string dir_;
};

TEST_F(WorkerGroupTest, LaunchFindsTheEndpointAndKillEndsTheWholeGroup) {
  ProcessLauncher launcher(options("ok"));
  ::testing::internal::CaptureStderr();
  auto g = launcher.launch(30, nullptr);
  ASSERT_TRUE(g.ok()) << g.status().message();
  WorkerHandle& group = *g.value();
  EXPECT_GT(group.port(), 0);
  const std::vector<int64_t> pids = group.pids();
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_EQ(pids[0], written_pid("rank-0.pid"));
  EXPECT_EQ(group.exit_reason(), "");
  const pid_t child = written_pid("child.pid");  // a process the worker started
  ASSERT_GT(child, 0);
  EXPECT_TRUE(process_alive(child));
  group.kill();
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("[worker 1] fake worker up"), std::string::npos) << out;
  EXPECT_NE(group.exit_reason().find("killed by signal 9"), std::string::npos) << group.exit_reason();
  EXPECT_FALSE(process_alive(static_cast<pid_t>(pids[0])));
  // Its grandchild, in the same process group, is gone too (or a zombie of init).
  for (int i = 0; i < 500 && process_alive(child); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_FALSE(process_alive(child));
  group.kill();  // idempotent
}

// A SIGKILLed front end leaves its rendezvous directory behind: the next launcher removes
// those whose owner is gone, and only those.
TEST_F(WorkerGroupTest, StaleRendezvousDirectoriesOfDeadSupervisorsAreRemoved) {
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  auto make = [&](const std::string& name, pid_t owner) {
    std::filesystem::create_directories(dir_ + "/" + name + "/group-1");
    if (owner > 0) std::ofstream(dir_ + "/" + name + "/supervisor.pid") << owner << "\n";
  };
  make("moe-supervisor-stale", dead);
  make("moe-supervisor-live", ::getpid());
  make("moe-supervisor-unowned", 0);
  {
    ProcessLauncher launcher(options("ok"));
    ::testing::internal::CaptureStderr();
    auto g = launcher.launch(30, nullptr);
    ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(g.ok()) << g.status().message();
    g.value()->kill();
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/moe-supervisor-stale"));
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/moe-supervisor-live"));
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/moe-supervisor-unowned"));
    int own = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("moe-supervisor-", 0) == 0 && n != "moe-supervisor-live" && n != "moe-supervisor-unowned") {
        std::ifstream in(e.path() / "supervisor.pid");
        pid_t pid = 0;
        in >> pid;
        EXPECT_EQ(pid, ::getpid()) << n;
        ++own;
      }
    }
    EXPECT_EQ(own, 1);
  }
}

TEST_F(WorkerGroupTest, ExitDuringStartUpIsUnavailableWithStatusAndLastOutput) {
  ProcessLauncher launcher(options("fail"));
  ::testing::internal::CaptureStderr();
  auto g = launcher.launch(30, nullptr);
  (void)::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(g.status().message().find("exited with status 3"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("error: no model here"), std::string::npos) << g.status().message();
}

TEST_F(WorkerGroupTest, NotReadyInTimeIsDeadlineExceededAndTheGroupIsKilled) {
  ProcessLauncher launcher(options("hang"));
  const auto start = std::chrono::steady_clock::now();
  auto g = launcher.launch(0.5, nullptr);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(g.status().message().find("not ready within"), std::string::npos);
  EXPECT_LT(took, 5.0);
  const pid_t pid = written_pid("rank-0.pid");
  if (pid > 0) {
    EXPECT_FALSE(process_alive(pid));
  }
}

TEST_F(WorkerGroupTest, CancelEndsAStartUpSoon) {
  ProcessLauncher launcher(options("hang"));
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  const auto start = std::chrono::steady_clock::now();
  auto g = launcher.launch(60, &cancel);
  canceller.join();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("cancelled"), std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

TEST_F(WorkerGroupTest, MissingCommandIsAnErrorNamingIt) {
  WorkerGroupOptions o = options("ok");
  o.command = {"/nonexistent/moe-worker"};
  ProcessLauncher launcher(o);
  auto g = launcher.launch(5, nullptr);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("/nonexistent/moe-worker"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace moe::supervisor
