// The process side of `moe bench chaos`: the server under test as a child process
// (its own process group, its output captured), and finding its processes through
// /proc: the descendants of a pid, the MPI rank of each (Open MPI's
// OMPI_COMM_WORLD_RANK in /proc/PID/environ), whether a process is still alive. Linux.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moe/status.h"

namespace moe::serve_bench {

// One process as /proc/PID/stat describes it. `start_ticks` (field 22) tells a process
// from a later one that reuses its pid.
struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  char state = '?';          // R, S, D, T (stopped), Z (zombie), ...
  uint64_t start_ticks = 0;
};

// Reads `<proc_root>/<pid>/stat` (the command name may hold spaces and parentheses).
// NotFound when the process does not exist, DataLoss when the file is malformed.
StatusOr<ProcInfo> read_proc_info(const std::string& proc_root, pid_t pid);

// Every process under `proc_root` (numeric directories with a readable stat).
std::vector<ProcInfo> list_processes(const std::string& proc_root);

// The descendants of `root` (children, their children, ...), not `root` itself, from
// the ppid links of `procs`. Zombies are included (they are still there).
std::vector<ProcInfo> descendants_of(const std::vector<ProcInfo>& procs, pid_t root);

// OMPI_COMM_WORLD_RANK from `<proc_root>/<pid>/environ`, or -1 when it has none (or
// the file cannot be read).
int mpi_rank_of(const std::string& proc_root, pid_t pid);

// The MPI ranks among the live (not zombie) descendants of `root`: rank -> pid. A rank
// seen twice (a relaunched group whose old process lingers) keeps the newest process.
std::map<int, pid_t> find_rank_pids(const std::string& proc_root, pid_t root);

// True when `p` (same pid and start time) still exists and is not a zombie.
bool still_running(const std::string& proc_root, const ProcInfo& p);

// A command started in its own process group (pgid = its pid) with stdout and stderr
// captured (kept in memory, and written to `log_path` when set). Not copyable.
class ChildProcess {
 public:
  // Spawns argv (argv[0] looked up in PATH). Internal naming the command when it cannot.
  static StatusOr<std::unique_ptr<ChildProcess>> spawn(const std::vector<std::string>& argv,
                                                       const std::string& log_path = "");
  ~ChildProcess();  // kill_all(), then joins the reader
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::string output() const;  // everything captured so far
  // Waits (at most `seconds`) until the reader has seen the end of the output: after the
  // process exited, so that output() holds all it wrote.
  void wait_output_end(double seconds) const;
  // True once the process has exited (reaped); `status` gets waitpid's status.
  bool exited(int* status = nullptr);
  // SIGKILL to the process group, to `also` (processes that left the group, e.g. a
  // worker group in its own process group), then reaps the child (bounded wait).
  void kill_all(const std::vector<ProcInfo>& also = {});

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::atomic<bool> stop_{false};  // the reader stops (destructor)
  std::atomic<bool> eof_{false};   // the reader saw the end of the output
  std::thread reader_;
  mutable std::mutex mu_;
  std::string output_;
  int log_fd_ = -1;
};

// "exit 0", "exit 1", "signal 9" from a waitpid status.
std::string describe_wait_status(int status);

// The first "serving ... on http://HOST:PORT" line of `output`: PORT, or 0 when there is none.
int find_serving_port(const std::string& output);

}  // namespace moe::serve_bench
