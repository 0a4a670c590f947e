// Live expert migration: moves expert weights between ranks so that a new placement
// can take effect (live rebalancing).
//
// For every (MoE layer, expert) that the next placement puts on a rank which does not
// hold it now, the lowest rank holding it now sends all three tensors of the expert
// (w1, w2, w3 together, each with its FP8 block scales if it has them: a header of
// dtypes, scale dtypes, block sizes and size, the bytes, an XXH3-64 checksum) point to
// point; the receiver verifies sizes and checksum into a buffer it owns. Transfers run
// in one global order on every rank (no deadlock: the earliest pending transfer always
// has both ends waiting on it). Then all ranks agree (allreduce) whether every transfer
// succeeded: only then are the layer weights switched (gained experts point to the
// received buffers, lost ones are unloaded and their buffers freed); otherwise nothing
// changes and every rank returns the error, so the old plan stays in force everywhere.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/placement/expert_placement.h"
#include "moe/status.h"

namespace moe {

// Owned copies of experts received from other ranks, keyed by (layer, expert).
using ExpertStore = std::map<std::pair<int, int>, std::vector<uint8_t>>;

struct MigrationStats {
  int64_t experts_received = 0;  // by this rank
  int64_t experts_sent = 0;      // by this rank
  int64_t bytes_received = 0;
  int64_t experts_moved = 0;  // over all ranks
  double seconds = 0;
};

// Message tags of a migration (point-to-point): per moved expert, a dtype/size header,
// the expert's bytes, their XXH3-64 checksum. Tests corrupt kMigrationTagData with
// FaultyCommunicator (comm/faulty_communicator.h).
inline constexpr int kMigrationTagHeader = 7101, kMigrationTagData = 7102, kMigrationTagSum = 7103;

// Which experts move: current[l] / next[l] are the placements of model layer l
// (entries for dense layers are ignored; `moe_layers` lists the MoE layers). Not
// owned; valid for the call.
struct MigrationPlan {
  const ModelConfig& config;
  const std::vector<int>& moe_layers;
  const std::vector<const ExpertPlacement*>& current;
  const std::vector<const ExpertPlacement*>& next;
};

// What a migration updates on this rank: `layers` are its weights (experts it holds
// now are loaded); `store` owns the experts received from other ranks.
struct MigrationTarget {
  std::vector<LayerWeights>* layers = nullptr;
  ExpertStore* store = nullptr;
};

// Collective over comm. Errors: DataLoss for a size or checksum mismatch (on the
// receiving rank, and on the others naming how many ranks failed), communication
// errors. On error nothing is changed.
Status migrate_experts(Communicator& comm, const MigrationPlan& plan, const MigrationTarget& target,
                       MigrationStats* stats);

}  // namespace moe
