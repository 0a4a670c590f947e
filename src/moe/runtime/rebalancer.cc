#include "moe/runtime/rebalancer.h"

#include <algorithm>

#include "moe/core/clock.h"
#include "moe/core/logging.h"
#include "moe/placement/placement_plan.h"
#include "moe/placement/replica_planner.h"

namespace moe {
namespace {

// Relabels a planned layer's rank sets so that as many experts as possible stay where
// they are (fewer bytes to move): rank sets are symmetric among the ranks of one node,
// so each set goes greedily to the rank of its node that already holds most of it.
void keep_experts_in_place(const ExpertPlacement& current, const std::vector<int>& rank_node,
                           std::vector<std::vector<int>>* rank_slots) {
  const int R = static_cast<int>(rank_slots->size());
  std::vector<std::vector<int>> out(static_cast<size_t>(R));
  std::vector<bool> set_used(static_cast<size_t>(R), false), rank_used(static_cast<size_t>(R), false);
  for (int round = 0; round < R; ++round) {
    int best_set = -1, best_rank = -1, best_overlap = -1;
    for (int s = 0; s < R; ++s) {
      if (set_used[static_cast<size_t>(s)]) continue;
      for (int r = 0; r < R; ++r) {
        if (rank_used[static_cast<size_t>(r)] || rank_node[static_cast<size_t>(r)] != rank_node[static_cast<size_t>(s)]) continue;
        int overlap = 0;
        for (int e : (*rank_slots)[static_cast<size_t>(s)]) overlap += current.holds(r, e);
        if (overlap > best_overlap) {
          best_overlap = overlap;
          best_set = s;
          best_rank = r;
        }
      }
    }
    set_used[static_cast<size_t>(best_set)] = true;
    rank_used[static_cast<size_t>(best_rank)] = true;
    out[static_cast<size_t>(best_rank)] = std::move((*rank_slots)[static_cast<size_t>(best_set)]);
  }
  *rank_slots = std::move(out);
}

}  // namespace

Status Rebalancer::rebalance() {
  Communicator& comm = *in_.comm;
  const ModelConfig& c = *in_.config;
  std::vector<EpContext>& ep = *in_.ep;
  const int R = comm.size(), E = c.router.num_experts;
  const double t0 = now_seconds();
  std::vector<int> moe_layers;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.is_moe_layer(l)) moe_layers.push_back(l);
  }
  // Encoded plan: per MoE layer, per rank: count, expert ids. {-1} = planning failed.
  std::vector<int64_t> flat;
  if (comm.rank() == 0) {
    PlannerInput in;
    const ExpertLoadStats& stats = *in_.load_stats;
    for (int l : moe_layers) {
      const auto& ema = stats.ema(l);
      in.load.emplace_back(ema.begin(), ema.end());
      in.layer_ids.push_back(l);
    }
    in.num_ranks = R;
    in.num_nodes = R % comm.num_nodes() == 0 ? comm.num_nodes() : 1;
    int m = std::max(1, in_.options.min_replicas);
    in.slots_per_rank = in_.options.slots_per_rank > 0 ? in_.options.slots_per_rank : (E * m + R - 1) / R;
    // After a failover the group may be too small for the floor: keep as many replicas
    // as the slots allow (distinct ranks, R * slots >= E * m), at least one.
    m = std::max(1, std::min({m, R, R * in.slots_per_rank / std::max(E, 1)}));
    in.replica_cap = in_.options.replica_cap;
    in.min_replicas = m;
    auto plan = plan_placement(in);
    // Hysteresis: moving experts costs real time, so a plan is adopted only when it
    // lowers the summed max rank load (the step-time proxy) by min_gain or more.
    double now_max = 0, new_max = 0;
    if (plan.ok()) {
      for (size_t i = 0; i < plan->layers.size(); ++i) {
        LayerPlan current;
        const ExpertPlacement& cur = ep[static_cast<size_t>(in.layer_ids[i])].placement;
        for (int r = 0; r < R; ++r) current.rank_slots.push_back(cur.experts_on(r));
        current.replica_count = count_replicas(current, E);
        const auto cur_loads = rank_loads(current, in.load[i], R);
        const auto new_loads = rank_loads(plan->layers[i], in.load[i], R);
        now_max += *std::max_element(cur_loads.begin(), cur_loads.end());
        new_max += *std::max_element(new_loads.begin(), new_loads.end());
      }
    }
    if (!plan.ok()) {
      MOE_LOG_ERROR("rebalancing: planner failed, placement unchanged: {}", plan.status().message());
      flat = {-1};
    } else if (!(new_max < now_max * (1.0 - in_.options.min_gain))) {
      MOE_LOG_DEBUG("rebalancing: predicted max rank load {:.2f} -> {:.2f}, below the gain threshold: kept", now_max,
                    new_max);
      flat = {-2};
    } else {
      std::vector<int> rank_node(static_cast<size_t>(R));
      for (int r = 0; r < R; ++r) rank_node[static_cast<size_t>(r)] = in.num_nodes > 1 ? comm.node_of(r) : 0;
      for (LayerPlan& lp : plan->layers) {
        keep_experts_in_place(ep[static_cast<size_t>(lp.layer)].placement, rank_node, &lp.rank_slots);
        for (const auto& slots : lp.rank_slots) {
          flat.push_back(static_cast<int64_t>(slots.size()));
          flat.insert(flat.end(), slots.begin(), slots.end());
        }
      }
    }
  }
  int64_t size = static_cast<int64_t>(flat.size());
  MOE_RETURN_IF_ERROR(comm.broadcast(&size, sizeof(size), 0));
  flat.resize(static_cast<size_t>(size));
  MOE_RETURN_IF_ERROR(comm.broadcast(flat.data(), flat.size() * sizeof(int64_t), 0));
  if (size == 1 && flat[0] == -1) return failed_precondition("rebalancing: the planner failed on rank 0");
  if (size == 1 && flat[0] == -2) {
    ++stats_.rebalances_skipped;
    return ok_status();
  }

  std::vector<ExpertPlacement> next_store(static_cast<size_t>(c.num_hidden_layers));
  std::vector<const ExpertPlacement*> current(static_cast<size_t>(c.num_hidden_layers), nullptr), next = current;
  size_t pos = 0;
  bool changed = false;
  for (int l : moe_layers) {
    std::vector<std::vector<int>> slots(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) {
      const int64_t n = flat.at(pos++);
      for (int64_t i = 0; i < n; ++i) slots[static_cast<size_t>(r)].push_back(static_cast<int>(flat.at(pos++)));
    }
    MOE_ASSIGN_OR_RETURN(next_store[static_cast<size_t>(l)], ExpertPlacement::from_rank_slots(slots, E));
    current[static_cast<size_t>(l)] = &ep[static_cast<size_t>(l)].placement;
    next[static_cast<size_t>(l)] = &next_store[static_cast<size_t>(l)];
    changed |= !(next_store[static_cast<size_t>(l)] == ep[static_cast<size_t>(l)].placement);
  }
  RebalanceStats& rs = stats_;
  if (changed) {
    MigrationStats ms;
    const MigrationPlan plan{.config = c, .moe_layers = moe_layers, .current = current, .next = next};
    const MigrationTarget target{.layers = in_.layers, .store = in_.expert_store};
    Status st = migrate_experts(comm, plan, target, &ms);
    rs.rebalance_seconds += now_seconds() - t0;
    if (!st.ok()) {
      ++rs.rebalance_failures;
      MOE_LOG_ERROR("rebalancing: expert migration failed, the previous placement stays in force: {}", st.message());
      return st;
    }
    for (int l : moe_layers) ep[static_cast<size_t>(l)].placement = std::move(next_store[static_cast<size_t>(l)]);
    rs.experts_moved += ms.experts_moved;
    MOE_LOG_INFO("rebalanced: {} experts moved ({:.2f} MB received by rank {}) in {:.1f} ms", ms.experts_moved,
                 ms.bytes_received / 1e6, comm.rank(), ms.seconds * 1e3);
  }
  ++rs.rebalances;
  return ok_status();
}


}  // namespace moe
