// Live rebalancing of expert placement under EP, collective over the EP group: rank 0
// plans a placement from the load statistics (per-step EMA of each MoE layer,
// src/moe/placement/replica_planner.h) and broadcasts it; it is adopted only if it lowers the
// predicted max rank load (summed over MoE layers) by min_gain; rank sets are
// relabelled within a node so experts stay where they are; the experts move point to
// point (expert_migration.h) and every rank switches before the next step. A failed
// migration keeps the old placement on every rank (the error is returned and logged).
#pragma once

#include <cstdint>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/runtime/expert_migration.h"
#include "moe/stats/expert_load_stats.h"

namespace moe {

struct RebalanceOptions {
  int slots_per_rank = 0;     // expert slots per rank; 0 = ceil(num_experts * min_replicas / num_ranks)
  int replica_cap = 4;        // most replicas of one expert
  int min_replicas = 1;       // fewest replicas of every expert, on distinct ranks (planner floor; lowered
                              // to what the ranks and slots allow when the group shrank after a failover)
  double min_gain = 0.1;      // adopt a plan only if it lowers the predicted max rank load by this fraction
};

// What a rebalance reads and updates. Pointers are not owned and must outlive the
// Rebalancer; all are required.
struct RebalanceInputs {
  Communicator* comm = nullptr;
  const ModelConfig* config = nullptr;
  const ExpertLoadStats* load_stats = nullptr;  // read on rank 0 (its EMA)
  std::vector<EpContext>* ep = nullptr;         // [num_layers] placements (dense layers unused); updated
  std::vector<LayerWeights>* layers = nullptr;  // this rank's weights; expert tensors updated
  ExpertStore* expert_store = nullptr;          // owns experts received from other ranks
  RebalanceOptions options{};
};

// Totals since start-up (the rebalancing part of Engine::EpStats).
struct RebalanceStats {
  int64_t rebalances = 0;           // plans switched to (or found already in force)
  int64_t rebalance_failures = 0;   // failed migrations
  int64_t experts_moved = 0;        // over all ranks
  int64_t rebalances_skipped = 0;   // plans not worth their migration (min_gain)
  double rebalance_seconds = 0;     // planning and migrating
};

class Rebalancer {
 public:
  explicit Rebalancer(const RebalanceInputs& inputs) : in_(inputs) {}

  // Every EP rank calls it at the same step boundary (rank 0 after broadcasting an
  // EpStepKind::kRebalance header). Updates the placements, the weights' expert tensors
  // and stats(). Errors: planning failed on rank 0 (FailedPrecondition), migration
  // (DataLoss) or communication failures; on error the placement is unchanged.
  Status rebalance();
  const RebalanceStats& stats() const { return stats_; }

 private:
  RebalanceInputs in_;
  RebalanceStats stats_;
};

}  // namespace moe
