// moe bench chaos's process side: /proc parsing and rank discovery (on a fake /proc
// tree with hand-written stat and environ files, and on real child processes), the
// captured child process and its serving line, and the store helpers of the corrupt
// fault (expert shard files, flipping a byte and back), and a trial whose server does
// not start.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "moe/serve_bench/chaos_process.h"
#include "moe/serve_bench/chaos_trial.h"
#include "moe/serve_bench/chaos_workload.h"

namespace moe::serve_bench {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string t = ::testing::TempDir() + "chaos_proc_XXXXXX";
    path_ = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A fake /proc/PID with a stat line (command name with a space and a parenthesis, as
// the kernel writes it) and an environment.
void fake_proc(const std::string& root, int pid, int ppid, char state, unsigned long long start,
               const std::vector<std::string>& env) {
  const std::string dir = root + "/" + std::to_string(pid);
  fs::create_directories(dir);
  std::ofstream(dir + "/stat") << pid << " (moe (x) y) " << state << " " << ppid << " " << ppid
                               << " 0 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 " << start << " 1000 10\n";
  std::ofstream e(dir + "/environ", std::ios::binary);
  for (const auto& v : env) e << v << '\0';
}

TEST(ChaosProc, ReadsStatFieldsPastAParenthesisedName) {
  TempDir t;
  fake_proc(t.path(), 42, 7, 'T', 12345, {});
  auto p = read_proc_info(t.path(), 42);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->ppid, 7);
  EXPECT_EQ(p->pgid, 7);
  EXPECT_EQ(p->state, 'T');
  EXPECT_EQ(p->start_ticks, 12345u);
  EXPECT_EQ(read_proc_info(t.path(), 43).status().code(), StatusCode::kNotFound);
  fs::create_directories(t.path() + "/44");
  std::ofstream(t.path() + "/44/stat") << "44 (broken";
  EXPECT_EQ(read_proc_info(t.path(), 44).status().code(), StatusCode::kDataLoss);
}

// A /proc file that opens but cannot be read (as when the process exits between the open
// and the read: ESRCH) is a vanished process, not an exception. A directory in place of
// the file gives the same open-then-read failure (EISDIR) deterministically; it used to
// throw std::ios_base::failure out of `moe bench chaos`.
TEST(ChaosProc, FileThatOpensButCannotBeReadIsAVanishedProcess) {
  TempDir t;
  fs::create_directories(t.path() + "/45/stat");
  fs::create_directories(t.path() + "/45/environ");
  auto p = read_proc_info(t.path(), 45);
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(mpi_rank_of(t.path(), 45), -1);
  EXPECT_TRUE(list_processes(t.path()).empty());
}

TEST(ChaosProc, FindsRanksAmongDescendantsOnly) {
  TempDir t;
  // 100 mpirun -> 101 rank 0, 102 rank 1 -> 103 (a child of rank 1, no rank);
  // 200: rank 1 of another job; 104: a zombie rank 0 of an older launch.
  fake_proc(t.path(), 100, 1, 'S', 10, {});
  fake_proc(t.path(), 101, 100, 'S', 20, {"PATH=/bin", "OMPI_COMM_WORLD_RANK=0"});
  fake_proc(t.path(), 102, 100, 'S', 21, {"OMPI_COMM_WORLD_RANK=1", "X=1"});
  fake_proc(t.path(), 103, 102, 'S', 22, {});
  fake_proc(t.path(), 104, 100, 'Z', 5, {"OMPI_COMM_WORLD_RANK=0"});
  fake_proc(t.path(), 200, 1, 'S', 30, {"OMPI_COMM_WORLD_RANK=1"});
  fs::create_directories(t.path() + "/self");  // not a pid: ignored
  const auto procs = list_processes(t.path());
  EXPECT_EQ(procs.size(), 6u);
  auto desc = descendants_of(procs, 100);
  std::vector<pid_t> pids;
  for (const auto& p : desc) pids.push_back(p.pid);
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(pids, (std::vector<pid_t>{101, 102, 103, 104}));
  EXPECT_EQ(mpi_rank_of(t.path(), 102), 1);
  EXPECT_EQ(mpi_rank_of(t.path(), 103), -1);
  EXPECT_EQ(mpi_rank_of(t.path(), 999), -1);
  const auto ranks = find_rank_pids(t.path(), 100);
  EXPECT_EQ(ranks, (std::map<int, pid_t>{{0, 101}, {1, 102}}));
}

TEST(ChaosProc, RealChildrenWithRankEnvironmentAreFound) {
  // Two sleeping children (in their own group) with OMPI_COMM_WORLD_RANK set.
  auto child = ChildProcess::spawn({"sh", "-c",
                                    "OMPI_COMM_WORLD_RANK=0 sleep 30 & OMPI_COMM_WORLD_RANK=1 sleep 30 & "
                                    "echo 'serving tiny on http://127.0.0.1:4321 (chat template: x)'; wait"});
  ASSERT_TRUE(child.ok()) << child.status().message();
  std::map<int, pid_t> ranks;
  for (int i = 0; i < 200 && ranks.size() < 2; ++i) {
    ranks = find_rank_pids("/proc", (*child)->pid());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(ranks.size(), 2u);
  for (int i = 0; i < 200 && find_serving_port((*child)->output()) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(find_serving_port((*child)->output()), 4321);
  auto rank1 = read_proc_info("/proc", ranks[1]);
  ASSERT_TRUE(rank1.ok());
  EXPECT_EQ(rank1->pgid, (*child)->pid());  // the whole tree is in the child's process group
  EXPECT_TRUE(still_running("/proc", *rank1));
  EXPECT_FALSE((*child)->exited());
  (*child)->kill_all();
  int status = 0;
  EXPECT_TRUE((*child)->exited(&status));
  EXPECT_EQ(describe_wait_status(status), "signal 9");
  // The grandchildren got the group's SIGKILL too (reaped by init or a subreaper).
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = !still_running("/proc", *rank1);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
}

TEST(ChaosProc, SpawnErrorsAndExitStatus) {
  auto missing = ChildProcess::spawn({"/nonexistent/moe-binary"});
  if (missing.ok()) {  // posix_spawnp may report exec failure as exit 127
    int status = 0;
    for (int i = 0; i < 200 && !(*missing)->exited(&status); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(describe_wait_status(status), "exit 127");
  } else {
    EXPECT_NE(missing.status().message().find("/nonexistent/moe-binary"), std::string::npos);
  }
  EXPECT_FALSE(ChildProcess::spawn({}).ok());
  auto quick = ChildProcess::spawn({"sh", "-c", "echo hi; exit 3"});
  ASSERT_TRUE(quick.ok());
  int status = 0;
  for (int i = 0; i < 500 && !(*quick)->exited(&status); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(describe_wait_status(status), "exit 3");
  EXPECT_EQ(find_serving_port("no such line"), 0);
}

TEST(ChaosStore, ExpertShardFilesAndByteFlips) {
  TempDir t;
  std::ofstream(t.path() + "/CURRENT") << "MANIFEST-000001\n";
  std::ofstream(t.path() + "/MANIFEST-000001")
      << R"({"shards":[{"kind":"layer","hash":"aa11"},{"kind":"expert","hash":"bc0123"},)"
      << R"({"kind":"expert","hash":"de4567"}]})";
  auto files = expert_shard_files(t.path());
  ASSERT_TRUE(files.ok()) << files.status().message();
  EXPECT_EQ(*files, (std::vector<std::string>{t.path() + "/shards/bc/bc0123.shard",
                                              t.path() + "/shards/de/de4567.shard"}));
  EXPECT_EQ(expert_shard_files(t.path() + "/nope").status().code(), StatusCode::kNotFound);
  const std::string f = t.path() + "/x.bin";
  std::ofstream(f, std::ios::binary) << "ABCD";
  ASSERT_TRUE(flip_byte(f, 2).ok());
  std::string s;
  std::getline(std::ifstream(f, std::ios::binary), s);
  EXPECT_EQ(s, std::string("AB") + static_cast<char>('C' ^ 0xFF) + "D");
  ASSERT_TRUE(flip_byte(f, 2).ok());
  std::getline(std::ifstream(f, std::ios::binary), s);
  EXPECT_EQ(s, "ABCD");
  EXPECT_FALSE(flip_byte(f, 10).ok());
  EXPECT_EQ(flip_byte(t.path() + "/missing", 0).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace moe::serve_bench

namespace moe::serve_bench {
namespace {

// run_chaos_trial's start-up failures: a server that exits, and one that prints its
// serving line but never answers /health; both are setup errors naming why, with the
// server's output, and leave no process behind.
TEST(ChaosTrialSetup, ServerThatExitsIsASetupErrorWithItsOutput) {
  ChaosRunOptions o;
  o.server_command = {"sh", "-c", "echo 'cannot load the model'; exit 3"};
  o.start_timeout_seconds = 10;
  const ChaosTrial t = run_chaos_trial(o, make_chaos_workload(2, 4, 0), FaultPlan{}, 1, {});
  EXPECT_NE(t.setup_error.find("the server ended (exit 3)"), std::string::npos) << t.setup_error;
  EXPECT_NE(t.setup_error.find("cannot load the model"), std::string::npos) << t.setup_error;
  EXPECT_TRUE(t.results.empty());
}

TEST(ChaosTrialSetup, ServerWithoutHealthTimesOutAndIsKilled) {
  TempDir dir;
  const std::string pid_file = dir.path() + "/pid";
  ChaosRunOptions o;
  // Port 1: nothing listens there. The background sleep writes its pid first.
  o.server_command = {"sh", "-c",
                      "sleep 30 & echo $! > " + pid_file + "; echo 'serving x on http://127.0.0.1:1 (y)'; wait"};
  o.start_timeout_seconds = 1;
  const ChaosTrial t = run_chaos_trial(o, make_chaos_workload(2, 4, 0), FaultPlan{}, 1, {});
  EXPECT_NE(t.setup_error.find("/health did not answer 200 within 1 s"), std::string::npos) << t.setup_error;
  pid_t sleeper = 0;
  std::ifstream(pid_file) >> sleeper;
  ASSERT_GT(sleeper, 0);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    auto p = read_proc_info("/proc", sleeper);
    gone = !p.ok() || p->state == 'Z';
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
}

}  // namespace
}  // namespace moe::serve_bench
