// The planner's cost model: alpha-beta time of each collective per link tier, and the
// roofline time of a block's compute. Pure functions; formulas and sources in
// docs/planner.md.
//
// Collectives over a group of n ranks on one tier (alpha, beta of that tier and primitive;
// S in bytes as defined per primitive):
//   allreduce       S = the buffer each rank holds        2(n-1) alpha + 2(n-1)/n S beta   (ring)
//   reduce_scatter  S = each rank's full input           (n-1) alpha +  (n-1)/n S beta    (ring)
//   allgather       S = each rank's full output          (n-1) alpha +  (n-1)/n S beta    (ring)
//   alltoall        S = what each rank sends, own block   (n-1) alpha + skew (n-1)/n S beta
//                   included; skew >= 1 = the busiest rank's bytes over the mean
//   p2p             S = the message                      alpha + S beta
// A group of n ranks on `nodes` nodes (g = n / nodes per node, g > 1, nodes > 1) runs the
// hierarchical forms (NCCL's tree-free two-level algorithm):
//   allreduce = RS_intra(g, S) + AR_inter(nodes, S / g) + AG_intra(g, S)
//   reduce_scatter = RS_intra(g, S) + RS_inter(nodes, S / g); allgather mirrored
//   alltoall = max(intra: (g-1) a_i + skew (g-1)/n S b_i,  inter: (n-g) a_e + skew (n-g)/n S b_e)
//              (NVLink and the NICs carry their shares at the same time)
// A group with one rank per node uses the inter_node tier; n == 1 costs 0.
#pragma once

#include "moe/planner/hardware_profile.h"

namespace moe::planner {

// `ranks` devices spread evenly over `nodes` nodes (ranks % nodes == 0).
struct GroupShape {
  int ranks = 1;
  int nodes = 1;
};

// Seconds for one collective; `bytes` as in the table above; skew applies to alltoall only.
double collective_seconds(const HardwareProfile& hw, Primitive p, GroupShape group, double bytes, double skew = 1.0);

// Seconds for one collective on a single tier with n ranks (the ring formulas above).
double tier_collective_seconds(const AlphaBeta& ab, Primitive p, int n, double bytes, double skew = 1.0);

// Roofline: max(flops / (peak * compute_efficiency), bytes / (memory_bandwidth *
// memory_efficiency)); `fp8` uses peak_flops_fp8 when the device has it.
double roofline_seconds(const DeviceSpec& d, double flops, double bytes, bool fp8);

}  // namespace moe::planner
