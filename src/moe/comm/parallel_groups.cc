#include "moe/comm/parallel_groups.h"

#include <string>

namespace moe {

StatusOr<ParallelGroups> make_parallel_groups(Communicator& world, int tp, int ep) {
  const int n = world.size();
  if (tp < 1) return invalid_argument("--tp must be >= 1 (got " + std::to_string(tp) + ")");
  if (ep < 1) return invalid_argument("--ep must be >= 1 (got " + std::to_string(ep) + ")");
  if (tp * ep != n) {
    return invalid_argument("--tp " + std::to_string(tp) + " x --ep " + std::to_string(ep) + " = " +
                            std::to_string(tp * ep) + " ranks, but the world has " + std::to_string(n) +
                            " (mpirun -np " + std::to_string(tp * ep) + ", or change --tp/--ep)");
  }
  for (int g = 0; g < ep; ++g) {  // every TP group inside one node
    const int first = g * tp, node = world.node_of(first);
    for (int r = first + 1; r < first + tp; ++r) {
      if (world.node_of(r) != node) {
        return invalid_argument("--tp " + std::to_string(tp) + ": TP group " + std::to_string(g) + " (ranks " +
                                std::to_string(first) + ".." + std::to_string(first + tp - 1) + ") spans node " +
                                std::to_string(node) + " (rank " + std::to_string(first) + ") and node " +
                                std::to_string(world.node_of(r)) + " (rank " + std::to_string(r) +
                                "); a TP group must lie inside one node: use --tp <= ranks per node (--ranks-per-node)");
      }
    }
  }
  ParallelGroups g;
  g.world = &world;
  g.tp_size = tp;
  g.ep_size = ep;
  g.tp_rank = world.rank() % tp;
  g.ep_rank = world.rank() / tp;
  // Both splits run on every rank (collective), also where the result is the world.
  if (tp > 1 && ep > 1) {
    MOE_ASSIGN_OR_RETURN(g.owned_tp, world.split(g.ep_rank, g.tp_rank));
    MOE_ASSIGN_OR_RETURN(g.owned_ep, world.split(g.tp_rank, g.ep_rank));
    g.tp = g.owned_tp.get();
    g.ep = g.owned_ep.get();
  } else if (tp > 1) {
    g.tp = &world;
  } else if (ep > 1) {
    g.ep = &world;
  }
  return g;
}

}  // namespace moe
