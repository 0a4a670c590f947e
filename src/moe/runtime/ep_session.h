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
//   kReplicaSwitch  while experts lost with a failed rank are being re-replicated:
//               every rank says whether its share is loaded; once all are, every
//               rank switches to the re-replicated placement (collective)
// Start-up agreement (agree_on_startup) runs once before any of this.
//
// Failover without a restart (level 1 of docs/reliability.md): when the
// communicator can re-form (Communicator::can_reform: the Gloo backend), a
// communication failure on any rank leads it to recover(): the survivors re-form the
// group (rank 0 stays rank 0 and coordinates), the runner adopts the survivors'
// placement (experts of the dead ranks are served by their replicas, or are "lost":
// their tokens go to the next-best live expert until re-replicated), and rank 0
// retries the step that failed. Without it a communication failure ends the group.
//
// Shutdown is explicit: rank 0 calls stop_workers() when it is done, on success and on
// error paths alike (a destructor never talks on the communicator).
//
// Single process (comm == nullptr): every rank-0 call is a no-op that returns OK.
// Thread-safety: one thread per session (the one driving the engine).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/model_source.h"
#include "moe/core/clock.h"
#include "moe/status.h"

namespace moe {

// Step header kinds (the first int64 of the header rank 0 broadcasts).
enum class EpStepKind : int64_t {
  kStop = 0,       // workers return from run_worker()
  kStep = 1,       // one forward pass (tokens on rank 0 = header[1])
  kRebalance = 2,  // live rebalancing (collective)
  kIdle = 3,       // nothing to do (keeps idle workers within the comm timeout)
  kReplicaSwitch = 4,  // switch to the re-replicated placement if every rank is ready (collective)
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
  // Every survivor, after the group re-formed without failed ranks: `kept` lists the
  // previous ranks that survive, ascending (previous rank kept[i] is now rank i).
  // Adopts the survivors' placement. Default: FailedPrecondition (cannot fail over).
  virtual Status on_group_shrunk(const std::vector<int>& kept);
  // True while a re-replication of lost experts is in progress (identical on every
  // rank: it follows from the placements). Default: false.
  virtual bool replicas_pending() const { return false; }
  // Every rank, at the same step boundary (kReplicaSwitch): switches to the
  // re-replicated placement once every rank has loaded its share. Default: OK.
  virtual Status switch_replicas_if_ready() { return ok_status(); }
};

struct EpSessionOptions {
  int rebalance_every = 0;  // decode steps between live rebalancings; 0 = never
  // Workers: the communicator's deadline after rank 0's first header (the wait for that
  // one keeps the longer start-up deadline the communicator was made with); 0 = keep it.
  double steady_timeout_seconds = 0;
  // Failover: how long rank 0 waits for the survivors to check in when the group
  // re-forms (a rank that has not checked in by then is left out), and how often rank 0
  // asks whether a re-replication is ready (seconds, > 0).
  double reform_join_seconds = 3;
  double replica_check_seconds = 0.2;
};

// Headers sent (rank 0) or received (workers) so far, by kind.
struct EpSessionCounters {
  int64_t steps = 0, rebalances = 0, idles = 0, stops = 0, replica_checks = 0;
  // Failover: group re-formations, ranks lost in them, and the time of the last one
  // (from recover()'s call until the runner adopted the survivors' placement).
  int64_t recoveries = 0, ranks_lost = 0;
  double last_recovery_seconds = 0;
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
  // Then, collective over comm: every rank's digest of every expert (model/weight_checks.h
  // expert_digests; the same count on every rank, index layer * num_experts + expert)
  // against rank 0's, so that one rank started with different or swapped expert weights
  // is refused. FailedPrecondition naming the first rank, layer and expert that
  // differ; `local` if it failed (digests not computed; the others name this rank).
  static Status agree_on_experts(Communicator& comm, const StatusOr<std::vector<ExpertDigest>>& local,
                                 int num_experts);

  // True for a communication failure (Unavailable, DeadlineExceeded): the group is
  // unusable. Other errors of a rebalance leave the old placement in force everywhere.
  static bool is_comm_failure(const Status& status);

  // True when a communication failure can be recovered from without a restart (EP on a
  // communicator that can re-form).
  bool can_recover() const { return comm_ != nullptr && comm_->can_reform(); }
  // Every rank, after `failure` (a communication failure, is_comm_failure): re-forms the
  // group without the ranks that do not check in within reform_join_seconds, then calls
  // the runner's on_group_shrunk. Returns `failure` itself when !can_recover(); the
  // re-formation's error (Unavailable: this rank was left out or rank 0 is gone: it must
  // exit) or the runner's. Rank 0 then retries its step; workers wait for the next header.
  Status recover(const Status& failure);
  // Rank 0: runs `step` (a forward pass that may announce headers, or after_step());
  // after a communication failure that can be recovered from, recovers and runs it
  // again, at most 3 times (the step must be safe to repeat: KV entries are rewritten
  // at the same positions). Returns the last error otherwise.
  Status run_with_failover(const std::function<Status()>& step);

  // Rank 0, or the only process.
  bool is_leader() const { return comm_ == nullptr || comm_->rank() == 0; }

  // --- Rank 0 ---
  // Tells the workers a forward pass of `num_tokens` tokens (on rank 0) follows.
  Status announce_step(int64_t num_tokens);
  // Records "now" as the last time the workers were busy (after a step).
  void mark_active();
  // While idle: if `heartbeat_seconds` have passed on the clock since the last
  // activity, sends an idle header (then counts as activity). While a re-replication
  // is pending it also asks the workers, every replica_check_seconds, whether it is
  // ready (kReplicaSwitch). Errors: communication.
  Status heartbeat_if_idle(double heartbeat_seconds);
  // After each decode step (generate) or batched step (Scheduler): every
  // rebalance_every calls, tells the workers and rebalances with them. A failed
  // rebalance is logged by the runner and keeps the old placement (returns OK); only
  // a communication failure is returned. While a re-replication is pending, every
  // replica_check_seconds it also runs a kReplicaSwitch with the workers.
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
  Status replica_check_if_due();
  // `status` if OK or not a recoverable communication failure, else recover(status).
  Status recover_or_fail(const Status& status);

  Communicator* comm_;
  EpStepRunner* runner_;
  Clock* clock_;
  EpSessionOptions options_;
  int64_t decode_steps_ = 0;  // after_step() calls (rebalance trigger)
  double last_active_seconds_ = 0;
  double last_replica_check_seconds_ = 0;
  bool workers_stopped_ = false;
  EpSessionCounters counters_;
};

}  // namespace moe
