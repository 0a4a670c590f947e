#include "moe/runtime/ep_session.h"

#include <algorithm>
#include <string>
#include <vector>

#include "moe/core/logging.h"

namespace moe {

Status EpStepRunner::on_group_shrunk(const std::vector<int>& /*kept*/) {
  return failed_precondition("this engine cannot continue without the failed rank(s)");
}

EpSession::EpSession(Communicator* comm, EpStepRunner* runner, Clock* clock, const EpSessionOptions& options)
    : comm_(comm), runner_(runner), clock_(clock), options_(options) {
  last_active_seconds_ = clock_->now_seconds();
}

Status EpSession::agree_on_startup(Communicator& comm, const Status& local, uint64_t fingerprint) {
  const int n = comm.size();
  int64_t mine[2] = {local.ok() ? 1 : 0, static_cast<int64_t>(fingerprint)};
  std::vector<int64_t> all(static_cast<size_t>(2 * n));  // [num_ranks, {loaded, fingerprint}]
  MOE_RETURN_IF_ERROR(comm.allgather(mine, sizeof(mine), all.data()).with_context("start-up check"));
  if (!local.ok()) return local;
  std::string failed;
  for (int r = 0; r < n; ++r) {
    if (all[static_cast<size_t>(2 * r)] == 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!failed.empty()) return failed_precondition("rank(s) " + failed + " failed to load the model (see their errors)");
  for (int r = 1; r < n; ++r) {
    if (all[static_cast<size_t>(2 * r + 1)] != all[1]) {
      return failed_precondition("rank " + std::to_string(r) + " loaded a different model than rank 0 (config/weights "
                                 "fingerprint " + std::to_string(static_cast<uint64_t>(all[static_cast<size_t>(2 * r + 1)])) +
                                 " vs " + std::to_string(static_cast<uint64_t>(all[1])) +
                                 "): start every rank with the same model files");
    }
  }
  return ok_status();
}

Status EpSession::agree_on_experts(Communicator& comm, const StatusOr<std::vector<ExpertDigest>>& local,
                                   int num_experts) {
  const int n = comm.size();
  // The count first (it follows from config.json, which the fingerprint already compared).
  const int64_t mine = local.ok() ? static_cast<int64_t>(local.value().size()) : -1;
  std::vector<int64_t> counts(static_cast<size_t>(n));
  MOE_RETURN_IF_ERROR(comm.allgather(&mine, sizeof(mine), counts.data()).with_context("start-up expert check"));
  if (!local.ok()) return local.status();
  std::string failed;
  for (int r = 0; r < n; ++r) {
    if (counts[static_cast<size_t>(r)] < 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!failed.empty()) return failed_precondition("rank(s) " + failed + " could not read their expert weights");
  const std::vector<ExpertDigest>& d = local.value();
  for (int r = 0; r < n; ++r) {
    if (counts[static_cast<size_t>(r)] != mine) {
      return failed_precondition("rank " + std::to_string(r) + " has " + std::to_string(counts[static_cast<size_t>(r)]) +
                                 " experts, this rank " + std::to_string(mine));
    }
  }
  std::vector<ExpertDigest> all(d.size() * static_cast<size_t>(n));
  if (!d.empty()) {
    MOE_RETURN_IF_ERROR(
        comm.allgather(d.data(), d.size() * sizeof(ExpertDigest), all.data()).with_context("start-up expert check"));
  }
  const int experts = std::max(1, num_experts);
  for (int r = 1; r < n; ++r) {
    for (size_t i = 0; i < d.size(); ++i) {
      if (all[static_cast<size_t>(r) * d.size() + i] == all[i]) continue;
      return failed_precondition("rank " + std::to_string(r) + " loaded different weights for layer " +
                                 std::to_string(i / static_cast<size_t>(experts)) + ", expert " +
                                 std::to_string(i % static_cast<size_t>(experts)) + " than rank 0 (XXH3-128 of " +
                                 "the expert's tensors differs): start every rank with the same model files");
    }
  }
  return ok_status();
}

bool EpSession::is_comm_failure(const Status& status) {
  return status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kDeadlineExceeded;
}

Status EpSession::recover_or_fail(const Status& status) {
  if (status.ok() || !is_comm_failure(status) || !can_recover()) return status;
  return recover(status);
}

Status EpSession::broadcast_header(EpStepKind kind, int64_t num_tokens) {
  int64_t header[2] = {static_cast<int64_t>(kind), num_tokens};
  MOE_RETURN_IF_ERROR(comm_->broadcast(header, sizeof(header), 0));
  switch (kind) {
    case EpStepKind::kStep: ++counters_.steps; break;
    case EpStepKind::kRebalance: ++counters_.rebalances; break;
    case EpStepKind::kIdle: ++counters_.idles; break;
    case EpStepKind::kStop: ++counters_.stops; break;
    case EpStepKind::kReplicaSwitch: ++counters_.replica_checks; break;
  }
  return ok_status();
}

Status EpSession::announce_step(int64_t num_tokens) {
  if (comm_ == nullptr) return ok_status();
  return broadcast_header(EpStepKind::kStep, num_tokens);
}

void EpSession::mark_active() { last_active_seconds_ = clock_->now_seconds(); }

Status EpSession::heartbeat_if_idle(double heartbeat_seconds) {
  if (comm_ == nullptr) return ok_status();
  MOE_RETURN_IF_ERROR(replica_check_if_due());
  if (clock_->now_seconds() - last_active_seconds_ < heartbeat_seconds) return ok_status();
  MOE_RETURN_IF_ERROR(broadcast_header(EpStepKind::kIdle, 0));
  mark_active();
  return ok_status();
}

// Every rank: a rebalance that failed without breaking the group keeps the old
// placement (the runner logged it); only a broken communicator is an error.
Status EpSession::rebalance_with_workers() {
  Status st = runner_->rebalance();
  if (!st.ok() && is_comm_failure(st)) return st;
  return ok_status();
}

Status EpSession::replica_check_if_due() {
  if (!runner_->replicas_pending()) return ok_status();
  const double now = clock_->now_seconds();
  if (now - last_replica_check_seconds_ < options_.replica_check_seconds) return ok_status();
  last_replica_check_seconds_ = now;
  MOE_RETURN_IF_ERROR(broadcast_header(EpStepKind::kReplicaSwitch, 0));
  mark_active();
  return runner_->switch_replicas_if_ready();
}

Status EpSession::after_step() {
  if (comm_ == nullptr) return ok_status();
  MOE_RETURN_IF_ERROR(replica_check_if_due().with_context("re-replication"));
  if (options_.rebalance_every <= 0 || ++decode_steps_ % options_.rebalance_every != 0) return ok_status();
  MOE_RETURN_IF_ERROR(broadcast_header(EpStepKind::kRebalance, 0));
  return rebalance_with_workers();
}

Status EpSession::run_with_failover(const std::function<Status()>& step) {
  Status st = step();
  for (int attempt = 0; attempt < 3 && !st.ok() && is_comm_failure(st) && can_recover(); ++attempt) {
    MOE_RETURN_IF_ERROR(recover(st));
    st = step();
  }
  return st;
}

Status EpSession::recover(const Status& failure) {
  if (!can_recover()) return failure;
  const double t0 = clock_->now_seconds();
  const std::vector<int> before = comm_->world_ranks();
  MOE_LOG_WARN("EP group: {}; re-forming it with the ranks that answer within {} s", failure.message(),
               options_.reform_join_seconds);
  MOE_RETURN_IF_ERROR(comm_->reform(options_.reform_join_seconds)
                          .with_context("re-forming the EP group after: " + failure.message()));
  const std::vector<int> after = comm_->world_ranks();
  std::vector<int> kept;
  for (int w : after) {
    size_t i = 0;
    while (i < before.size() && before[i] != w) ++i;
    if (i == before.size()) return internal_error("re-formed EP group has world rank " + std::to_string(w) + ", not a member before");
    kept.push_back(static_cast<int>(i));
  }
  MOE_RETURN_IF_ERROR(runner_->on_group_shrunk(kept).with_context("failover to the surviving ranks"));
  ++counters_.recoveries;
  counters_.ranks_lost += static_cast<int64_t>(before.size() - after.size());
  counters_.last_recovery_seconds = clock_->now_seconds() - t0;
  last_replica_check_seconds_ = 0;
  mark_active();
  MOE_LOG_WARN("EP group re-formed: {} of {} ranks in {:.2f} s; serving goes on", after.size(), before.size(),
               counters_.last_recovery_seconds);
  return ok_status();
}

Status EpSession::stop_workers() {
  if (comm_ == nullptr || comm_->rank() != 0 || workers_stopped_) return ok_status();
  workers_stopped_ = true;
  return broadcast_header(EpStepKind::kStop, 0);
}

Status EpSession::run_worker() {
  if (comm_ == nullptr || comm_->rank() == 0) return failed_precondition("run_worker() is for ranks other than 0 under EP");
  for (;;) {
    int64_t header[2] = {0, 0};  // {kind, num_tokens on rank 0}
    // Rank 0 sends a header at least every idle heartbeat: a timeout here means it is
    // dead or stuck.
    Status got = comm_->broadcast(header, sizeof(header), 0).with_context("waiting for rank 0's next step");
    if (!got.ok() && is_comm_failure(got) && can_recover()) {
      MOE_RETURN_IF_ERROR(recover(got));
      continue;
    }
    MOE_RETURN_IF_ERROR(got);
    if (options_.steady_timeout_seconds > 0 && comm_->timeout_seconds() != options_.steady_timeout_seconds) {
      comm_->set_timeout_seconds(options_.steady_timeout_seconds);  // start-up is over
    }
    switch (static_cast<EpStepKind>(header[0])) {
      case EpStepKind::kStop:
        ++counters_.stops;
        return ok_status();
      case EpStepKind::kIdle:
        ++counters_.idles;
        continue;
      case EpStepKind::kRebalance:
        ++counters_.rebalances;
        MOE_RETURN_IF_ERROR(recover_or_fail(rebalance_with_workers().with_context("live rebalancing")));
        continue;
      case EpStepKind::kReplicaSwitch:
        ++counters_.replica_checks;
        MOE_RETURN_IF_ERROR(recover_or_fail(runner_->switch_replicas_if_ready().with_context("re-replication")));
        continue;
      case EpStepKind::kStep:
      default:  // as before the protocol had names: any other kind is a step
        ++counters_.steps;
        MOE_RETURN_IF_ERROR(
            recover_or_fail(runner_->join_step().with_context("engine step " + std::to_string(counters_.steps))));
    }
  }
}

}  // namespace moe
