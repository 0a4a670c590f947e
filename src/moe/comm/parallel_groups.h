// The tensor-parallel (TP) and expert-parallel (EP) groups of a world of tp * ep ranks
// (MixServe's hybrid: TP inside a node, EP across nodes).
//
// World rank r has tp_rank = r % tp and ep_rank = r / tp:
//   TP group of r: ranks ep_rank * tp .. ep_rank * tp + tp - 1 (consecutive: one node);
//   EP group of r: ranks tp_rank, tp_rank + tp, ... (one per TP group, same tp_rank).
// Pure EP is tp = 1 (the EP group is the world), pure TP is ep = 1 (the TP group is
// the world). With --ranks-per-node (emulated nodes) a TP group must lie inside one
// node; EP groups span nodes.
#pragma once

#include <memory>

#include "moe/comm/communicator.h"
#include "moe/status.h"

namespace moe {

struct ParallelGroups {
  int tp_size = 1, tp_rank = 0;
  int ep_size = 1, ep_rank = 0;
  Communicator* world = nullptr;  // not owned
  // This rank's TP group (null when tp_size == 1) and EP group (null when ep_size == 1).
  // Either is `world` itself when it spans every rank, else an owned sub-communicator.
  Communicator* tp = nullptr;
  Communicator* ep = nullptr;
  std::unique_ptr<Communicator> owned_tp, owned_ep;

  // True on the rank that drives a TP group (tp_rank 0).
  bool tp_leader() const { return tp_rank == 0; }
};

// Builds the groups over `world` (collective: every rank calls it with the same tp, ep).
// Errors (InvalidArgument, naming --tp / --ep): tp or ep < 1, tp * ep != world size, a
// TP group whose ranks lie on different nodes (naming the ranks and nodes; fix
// --ranks-per-node or --tp); a backend that cannot split (FailedPrecondition, e.g. Gloo);
// communication errors.
StatusOr<ParallelGroups> make_parallel_groups(Communicator& world, int tp, int ep);

}  // namespace moe
