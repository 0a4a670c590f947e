// A hardware profile: what the planner's cost model knows about a cluster's devices and
// links (docs/planner.md). Read from a JSON file (profiles/*.json, or what
// `moe plan calibrate` writes); pure data, no I/O beyond the file read.
//
// Link tiers: intra_node (NVLink/NVSwitch, shared memory) and inter_node (the NIC of one
// device). Each tier has, for every collective primitive, an alpha-beta pair:
//   alpha: seconds per algorithm step (one ring step, one peer of an all-to-all, one message)
//   beta:  seconds per byte on one device's link (1 / the per-device bandwidth, B/s)
// The step counts and byte coefficients of each primitive are in cost_model.h. In the
// file a primitive is {"alpha": s, "beta": s_per_byte} or {"alpha": s, "bandwidth": B/s}.
#pragma once

#include <array>
#include <string>

#include "moe/status.h"

namespace moe::planner {

enum class Primitive { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kP2p };
inline constexpr int kNumPrimitives = 5;
// The profile file's key: "allreduce", "reduce_scatter", "allgather", "alltoall", "p2p".
const char* primitive_name(Primitive p);

enum class Tier { kIntraNode, kInterNode };
const char* tier_name(Tier t);  // "intra_node", "inter_node"

struct AlphaBeta {
  double alpha = 0;  // s per step
  double beta = 0;   // s per byte (per device link)
};

struct LinkTier {
  std::array<AlphaBeta, kNumPrimitives> primitive{};
  const AlphaBeta& operator[](Primitive p) const { return primitive[static_cast<size_t>(p)]; }
  AlphaBeta& operator[](Primitive p) { return primitive[static_cast<size_t>(p)]; }
};

// One accelerator (or, for a CPU profile, one rank's share of the machine).
struct DeviceSpec {
  double peak_flops_bf16 = 0;   // FLOP/s, dense
  double peak_flops_fp8 = 0;    // FLOP/s (0 = no FP8 units: FP8 weights run at the bf16 rate)
  double memory_bandwidth = 0;  // B/s (HBM)
  double memory_capacity = 0;   // bytes
  // Fractions of the peaks a real kernel reaches (roofline ceilings are multiplied by them).
  double compute_efficiency = 1.0;
  double memory_efficiency = 1.0;
  // Memory the runtime keeps for itself (CUDA context, allocator slack), bytes.
  double reserved_memory = 0;
  // Shared cores (CPU ranks on one host, e.g. emulated nodes): shared_ranks ranks share
  // the host's cores and memory bandwidth, and the efficiencies above are measured with
  // all of them computing at once. A rank computing while the others wait runs up to
  // solo_*_speedup times faster (calibrate measures it: rank 0 alone against all ranks at
  // once). The planner scales a phase in which only `a` of them compute by
  // min(speedup, shared_ranks / a) (docs/planner.md "Shared cores"). 1 = dedicated
  // devices (GPUs): no effect. JSON: device.shared_ranks, device.solo_speedup.{compute,memory}.
  int shared_ranks = 1;
  double solo_compute_speedup = 1.0, solo_memory_speedup = 1.0;
};

struct HardwareProfile {
  std::string name;
  std::string provenance;    // where the numbers come from (free text)
  int devices_per_node = 0;  // the node size the profile was measured with
  DeviceSpec device;
  LinkTier intra_node, inter_node;
  const LinkTier& tier(Tier t) const { return t == Tier::kIntraNode ? intra_node : inter_node; }
};

// Parses and validates a profile. Errors (InvalidArgument) name `source` and the field's
// path, e.g. "p.json: tiers.inter_node.alltoall: missing" or
// "p.json: device.memory_bandwidth: must be > 0". Every tier and every primitive of it is
// required; alpha >= 0, beta > 0 (or bandwidth > 0), peaks, bandwidth, capacity > 0,
// efficiencies in (0, 1].
StatusOr<HardwareProfile> parse_hardware_profile(const std::string& json_text, const std::string& source);
// Reads `path` (NotFound naming it) and parses it.
StatusOr<HardwareProfile> load_hardware_profile(const std::string& path);
// The JSON text of a profile (what parse_hardware_profile reads back; betas as "beta").
std::string hardware_profile_json(const HardwareProfile& p);

}  // namespace moe::planner
