#include "moe/runtime/failover.h"

#include <chrono>
#include <utility>

#include "moe/core/clock.h"
#include "moe/core/logging.h"
#include "moe/placement/failover_placement.h"

namespace moe {

Failover::Failover(FailoverInputs inputs) : in_(std::move(inputs)) {}

Failover::~Failover() { join_loader(); }

void Failover::join_loader() {
  if (loader_.joinable()) loader_.join();
}

bool Failover::degraded() const { return lost_now() > 0; }

int64_t Failover::lost_now() const {
  int64_t n = 0;
  for (int l = 0; l < in_.config->num_hidden_layers; ++l) {
    if (in_.config->is_moe_layer(l)) n += (*in_.ep)[static_cast<size_t>(l)].placement.num_lost();
  }
  return n;
}

Status Failover::on_group_shrunk(const std::vector<int>& kept) {
  join_loader();  // a re-replication in progress is abandoned: its staging is dropped
  stage_store_.clear();
  to_load_.clear();
  pending_ = false;
  const int me = in_.comm->rank();
  const int E = in_.config->router.num_experts;
  stage_layers_.assign(in_.layers->size(), LayerWeights{});
  target_.assign(in_.ep->size(), ExpertPlacement{});
  int64_t lost = 0;
  for (int l = 0; l < in_.config->num_hidden_layers; ++l) {
    if (!in_.config->is_moe_layer(l)) continue;
    EpContext& ctx = (*in_.ep)[static_cast<size_t>(l)];
    MOE_ASSIGN_OR_RETURN(ctx.placement, survivor_placement(ctx.placement, kept));
    lost += ctx.placement.num_lost();
    ExpertPlacement& target = target_[static_cast<size_t>(l)];
    MOE_ASSIGN_OR_RETURN(target, rereplication_target(ctx.placement, in_.slots_per_rank, {}));
    stage_layers_[static_cast<size_t>(l)].experts.assign(static_cast<size_t>(E), ExpertWeights{});
    for (int e : ctx.placement.lost_experts()) {
      if (target.holds(me, e)) to_load_.push_back({l, e});
    }
  }
  ++stats_.group_changes;
  stats_.experts_lost += lost;
  changed_at_ = now_seconds();
  if (lost == 0) {
    MOE_LOG_WARN("failover: every expert still has a live replica on the {} surviving rank(s)", kept.size());
    return ok_status();
  }
  MOE_LOG_WARN("failover: {} (layer, expert) pair(s) lost with the failed rank(s); their tokens go to the next-best "
               "live expert until re-replicated ({} to load on this rank)",
               lost, to_load_.size());
  pending_ = true;
  done_ = false;
  load_status_ = ok_status();
  loader_ = std::thread([this] {
    Status st = ok_status();
    for (const auto& [l, e] : to_load_) {
      st = in_.load_expert(l, e, &stage_layers_, &stage_store_)
               .with_context("re-replicating layer " + std::to_string(l) + ", expert " + std::to_string(e));
      if (!st.ok()) break;
    }
    load_status_ = st;
    done_ = true;
  });
  // A layer with fewer live experts than top_k cannot route at all: wait for the loads
  // and switch now (every rank decides the same from the same placements).
  bool can_route = true;
  for (int l = 0; l < in_.config->num_hidden_layers; ++l) {
    if (!in_.config->is_moe_layer(l)) continue;
    const ExpertPlacement& p = (*in_.ep)[static_cast<size_t>(l)].placement;
    if (p.num_experts() - p.num_lost() < in_.config->router.top_k) can_route = false;
  }
  if (!can_route) {
    MOE_LOG_WARN("failover: too few live experts to route top-{}: re-replicating before serving on", in_.config->router.top_k);
    join_loader();
    return switch_if_ready();
  }
  // A quick re-load is worth a short wait: exact outputs instead of degraded ones.
  const double until = now_seconds() + in_.wait_seconds;
  while (!done_.load() && now_seconds() < until) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return switch_if_ready();
}

Status Failover::switch_if_ready() {
  if (!pending_) return ok_status();
  const bool done = done_.load();
  int64_t flags[2] = {done ? 0 : 1, done && !load_status_.ok() ? 1 : 0};  // {not ready, failed}
  MOE_RETURN_IF_ERROR(in_.comm->allreduce_sum(flags, 2));
  if (flags[0] > 0) return ok_status();
  join_loader();
  pending_ = false;
  if (flags[1] > 0) {
    ++stats_.rereplication_failures;
    if (!load_status_.ok()) MOE_LOG_ERROR("failover: {}", load_status_.message());
    MOE_LOG_ERROR("failover: re-replication failed on {} rank(s); lost experts stay rerouted (degraded)", flags[1]);
    stage_store_.clear();
    return ok_status();
  }
  // Commit: the staged bytes move into the engine's store (a vector's buffer survives
  // the move, so the staged weights' pointers stay valid), the weights are bound.
  for (auto& [key, bytes] : stage_store_) (*in_.expert_store)[key] = std::move(bytes);
  stage_store_.clear();
  for (const auto& [l, e] : to_load_) {
    (*in_.layers)[static_cast<size_t>(l)].experts[static_cast<size_t>(e)] =
        stage_layers_[static_cast<size_t>(l)].experts[static_cast<size_t>(e)];
  }
  const int64_t before = lost_now();
  for (int l = 0; l < in_.config->num_hidden_layers; ++l) {
    if (in_.config->is_moe_layer(l)) (*in_.ep)[static_cast<size_t>(l)].placement = target_[static_cast<size_t>(l)];
  }
  stats_.experts_rereplicated += before - lost_now();
  stats_.last_rereplication_seconds = now_seconds() - changed_at_;
  MOE_LOG_WARN("failover: {} lost (layer, expert) pair(s) re-replicated in {:.2f} s; routing is exact again", before,
               stats_.last_rereplication_seconds);
  return ok_status();
}

}  // namespace moe
