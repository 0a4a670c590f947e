#include "moe/planner/cost_model.h"

#include <algorithm>

namespace moe::planner {

double tier_collective_seconds(const AlphaBeta& ab, Primitive p, int n, double bytes, double skew) {
  if (p == Primitive::kP2p) return ab.alpha + bytes * ab.beta;
  if (n <= 1) return 0.0;
  const double steps = n - 1;
  const double frac = static_cast<double>(n - 1) / n;
  switch (p) {
    case Primitive::kAllReduce:
      return 2 * steps * ab.alpha + 2 * frac * bytes * ab.beta;
    case Primitive::kReduceScatter:
    case Primitive::kAllGather:
      return steps * ab.alpha + frac * bytes * ab.beta;
    case Primitive::kAllToAll:
      return steps * ab.alpha + skew * frac * bytes * ab.beta;
    case Primitive::kP2p:
      break;
  }
  return 0.0;
}

double collective_seconds(const HardwareProfile& hw, Primitive p, GroupShape group, double bytes, double skew) {
  const int n = group.ranks, nodes = std::max(1, group.nodes);
  if (p == Primitive::kP2p) {
    return tier_collective_seconds((nodes > 1 ? hw.inter_node : hw.intra_node)[p], p, 2, bytes);
  }
  if (n <= 1) return 0.0;
  if (nodes == 1) return tier_collective_seconds(hw.intra_node[p], p, n, bytes, skew);
  const int g = n / nodes;
  if (g <= 1) return tier_collective_seconds(hw.inter_node[p], p, n, bytes, skew);
  const auto& in = hw.intra_node;
  const auto& ex = hw.inter_node;
  switch (p) {
    case Primitive::kAllReduce:
      return tier_collective_seconds(in[Primitive::kReduceScatter], Primitive::kReduceScatter, g, bytes) +
             tier_collective_seconds(ex[Primitive::kAllReduce], Primitive::kAllReduce, nodes, bytes / g) +
             tier_collective_seconds(in[Primitive::kAllGather], Primitive::kAllGather, g, bytes);
    case Primitive::kReduceScatter:
      return tier_collective_seconds(in[p], p, g, bytes) + tier_collective_seconds(ex[p], p, nodes, bytes / g);
    case Primitive::kAllGather:
      return tier_collective_seconds(ex[p], p, nodes, bytes / g) + tier_collective_seconds(in[p], p, g, bytes);
    case Primitive::kAllToAll: {
      const AlphaBeta a = in[p], e = ex[p];
      const double intra = (g - 1) * a.alpha + skew * static_cast<double>(g - 1) / n * bytes * a.beta;
      const double inter = (n - g) * e.alpha + skew * static_cast<double>(n - g) / n * bytes * e.beta;
      return std::max(intra, inter);
    }
    case Primitive::kP2p:
      break;
  }
  return 0.0;
}

double roofline_seconds(const DeviceSpec& d, double flops, double bytes, bool fp8) {
  const double peak = (fp8 && d.peak_flops_fp8 > 0) ? d.peak_flops_fp8 : d.peak_flops_bf16;
  const double tc = flops > 0 ? flops / (peak * d.compute_efficiency) : 0.0;
  const double tm = bytes > 0 ? bytes / (d.memory_bandwidth * d.memory_efficiency) : 0.0;
  return std::max(tc, tm);
}

}  // namespace moe::planner
