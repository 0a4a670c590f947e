// Live rebalancing of expert placement under EP, collective over the EP group: rank 0
// plans a placement from the load statistics (per-step EMA of each MoE layer,
// src/moe/placement/replica_planner.h) and broadcasts it; it is adopted only if it lowers the
// predicted max rank load (summed over MoE layers) by rebalance_min_gain; rank sets are
// relabelled within a node so experts stay where they are; the experts move point to
// point (expert_migration.h) and every rank switches before the next step. A failed
// migration keeps the old placement on every rank (the error is returned and logged).
#pragma once

#include "moe/engine/engine_impl.h"

namespace moe {

// Every EP rank calls it at the same step boundary (rank 0 after broadcasting a
// kEpHeaderRebalance header). Updates impl->ep[*].placement, the weights' expert
// tensors and impl->rebalance_stats. Errors: planning failed on rank 0
// (FailedPrecondition), migration or communication failures.
Status rebalance(Engine::Impl* impl);

}  // namespace moe
