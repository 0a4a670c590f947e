// A supervised worker group: the processes that run the engine (`moe serve
// --worker-endpoint DIR`, under mpirun for --ep N > 1), started in their own process
// group so that one kill ends them all.
//
// WorkerLauncher / WorkerHandle are what SupervisedService (supervised_service.h) needs:
// start a group and wait until it serves, find its endpoint, notice that a process of it
// exited, kill it. ProcessLauncher implements them with real processes (posix_spawn +
// setpgid); tests implement them in-process.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::supervisor {

// One running worker group. Thread-safe.
class WorkerHandle {
 public:
  virtual ~WorkerHandle() = default;  // kills the group if still running
  // The group's endpoint (worker_protocol.h) on 127.0.0.1.
  virtual int port() const = 0;
  // The pid of each rank (index = rank; -1 where unknown).
  virtual std::vector<int64_t> pids() const = 0;
  // "" while the group runs; once its process (mpirun, or the one worker) has exited,
  // how it ended ("exited with status 1", "killed by signal 9"), with its last output.
  virtual std::string exit_reason() = 0;
  // SIGKILL to every process of the group, then reaps it (bounded). Idempotent.
  virtual void kill() = 0;
};

class WorkerLauncher {
 public:
  virtual ~WorkerLauncher() = default;
  // Starts a worker group and waits until its endpoint answers /health "ok", for up to
  // `timeout_seconds`. Errors (the group is killed then): Unavailable when it exited
  // during start-up (the message has its exit status and last output), DeadlineExceeded
  // when it was not ready in time, Internal when it could not be spawned, and Unavailable
  // ("start-up cancelled") soon after *cancel becomes true (cancel may be null).
  virtual StatusOr<std::unique_ptr<WorkerHandle>> launch(double timeout_seconds,
                                                         const std::atomic<bool>* cancel) = 0;
};

struct WorkerGroupOptions {
  // The command up to the subcommand, e.g. {"mpirun", "--oversubscribe", "-np", "2",
  // "/usr/bin/moe", "--log-level", "warn", "serve"}; argv[0] is looked up in PATH.
  std::vector<std::string> command;
  // Appended after "--worker-endpoint DIR --supervisor-pid PID": the engine and
  // scheduler flags.
  std::vector<std::string> args;
  int num_ranks = 1;               // ranks that write a pid file (--ep)
  std::string work_dir;            // where rendezvous directories go; "" = $TMPDIR or /tmp
  double probe_timeout_seconds = 2;  // one /health request during start-up
  double reap_timeout_seconds = 5;   // waiting for the killed group to exit
};

// Starts groups as child processes: their output (stdout and stderr) goes to this
// process's stderr, each line prefixed "[worker G] " (G = the launch number, from 1).
class ProcessLauncher final : public WorkerLauncher {
 public:
  explicit ProcessLauncher(WorkerGroupOptions options);
  // The first launch removes the rendezvous directories (moe-supervisor-*, under
  // work_dir) of supervisors that are no longer running (SIGKILLed ones could not).
  ~ProcessLauncher() override;  // removes the rendezvous directories
  StatusOr<std::unique_ptr<WorkerHandle>> launch(double timeout_seconds, const std::atomic<bool>* cancel) override;

 private:
  WorkerGroupOptions options_;
  std::string root_dir_;  // mkdtemp'd on first launch
  int launches_ = 0;
};

}  // namespace moe::supervisor
