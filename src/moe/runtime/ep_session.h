// The expert-parallel step protocol between rank 0 and the worker ranks.
//
// Under EP, rank 0 drives (Engine::generate or the Scheduler) and every other rank runs
// the worker loop. Before each collective action rank 0 broadcasts a step header
// {kind, num_tokens} (two int64), and every worker does the same action:
//   kStep       one forward pass (workers join its MoE exchanges with no tokens)
//   kRebalance  live rebalancing, every `rebalance_every` decode steps (collective)
//   kIdle       nothing: sent while idle so the workers' waits stay within the
//               communicator's timeout (the heartbeat)
//   kStop       the workers return from run_worker()
// Start-up agreement (agree_on_startup) runs once before any of this.
//
// Shutdown is explicit: rank 0 calls stop_workers() when it is done, on success and on
// error paths alike (a destructor never talks on the communicator).
//
// Single process (comm == nullptr): every rank-0 call is a no-op that returns OK.
// Thread-safety: one thread per session (the one driving the engine).
#pragma once

#include <cstdint>

#include "moe/comm/communicator.h"
#include "moe/core/clock.h"
#include "moe/status.h"

namespace moe {

// Step header kinds (the first int64 of the header rank 0 broadcasts).
enum class EpStepKind : int64_t {
  kStop = 0,       // workers return from run_worker()
  kStep = 1,       // one forward pass (tokens on rank 0 = header[1])
  kRebalance = 2,  // live rebalancing (collective)
  kIdle = 3,       // nothing to do (keeps idle workers within the comm timeout)
};

// What a session has every rank do for a step or a rebalance (implemented by the
// Engine over its decoder and rebalancer; by fakes in tests).
class EpStepRunner {
 public:
  virtual ~EpStepRunner() = default;
  // Worker ranks: join one forward pass with no tokens of their own.
  virtual Status join_step() = 0;
  // Every rank, at the same step boundary: one live rebalancing (collective). A
  // failure that leaves the group usable (e.g. a failed migration) is any error other
  // than Unavailable / DeadlineExceeded.
  virtual Status rebalance() = 0;
};

struct EpSessionOptions {
  int rebalance_every = 0;  // decode steps between live rebalancings; 0 = never
  // Workers: the communicator's deadline after rank 0's first header (the wait for that
  // one keeps the longer start-up deadline the communicator was made with); 0 = keep it.
  double steady_timeout_seconds = 0;
};

// Headers sent (rank 0) or received (workers) so far, by kind.
struct EpSessionCounters {
  int64_t steps = 0, rebalances = 0, idles = 0, stops = 0;
};

class EpSession {
 public:
  // comm, runner and clock are not owned and must outlive the session; comm may be
  // nullptr (single process), runner and clock may not.
  EpSession(Communicator* comm, EpStepRunner* runner, Clock* clock, const EpSessionOptions& options = {});
  EpSession(const EpSession&) = delete;
  EpSession& operator=(const EpSession&) = delete;

  // Start-up agreement, collective over comm: every rank learns whether every rank
  // loaded (`local`) and loaded the same model (`fingerprint`). Returns `local` if it
  // failed; FailedPrecondition naming the rank(s) that failed to load, or the first
  // rank whose fingerprint differs from rank 0's; a communication error as is.
  static Status agree_on_startup(Communicator& comm, const Status& local, uint64_t fingerprint);

  // True for a communication failure (Unavailable, DeadlineExceeded): the group is
  // unusable. Other errors of a rebalance leave the old placement in force everywhere.
  static bool is_comm_failure(const Status& status);

  // Rank 0, or the only process.
  bool is_leader() const { return comm_ == nullptr || comm_->rank() == 0; }

  // --- Rank 0 ---
  // Tells the workers a forward pass of `num_tokens` tokens (on rank 0) follows.
  Status announce_step(int64_t num_tokens);
  // Records "now" as the last time the workers were busy (after a step).
  void mark_active();
  // While idle: if `heartbeat_seconds` have passed on the clock since the last
  // activity, sends an idle header (then counts as activity). Errors: communication.
  Status heartbeat_if_idle(double heartbeat_seconds);
  // After each decode step (generate) or batched step (Scheduler): every
  // rebalance_every calls, tells the workers and rebalances with them. A failed
  // rebalance is logged by the runner and keeps the old placement (returns OK); only
  // a communication failure is returned.
  Status after_step();
  // Releases the workers (kStop). Idempotent; OK without EP or on workers.
  Status stop_workers();
  bool workers_stopped() const { return workers_stopped_; }

  // --- Ranks other than 0 ---
  // Follows rank 0's headers until kStop. FailedPrecondition on rank 0 or without EP;
  // errors: communication, a failed step, a rebalance's communication failure.
  Status run_worker();

  const EpSessionCounters& counters() const { return counters_; }

 private:
  Status broadcast_header(EpStepKind kind, int64_t num_tokens);
  Status rebalance_with_workers();

  Communicator* comm_;
  EpStepRunner* runner_;
  Clock* clock_;
  EpSessionOptions options_;
  int64_t decode_steps_ = 0;  // after_step() calls (rebalance trigger)
  double last_active_seconds_ = 0;
  bool workers_stopped_ = false;
  EpSessionCounters counters_;
};

}  // namespace moe
