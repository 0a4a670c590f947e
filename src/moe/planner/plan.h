// The strategy planner (docs/planner.md): for a model (config.json), a hardware
// profile and a cluster (nodes x devices per node), enumerate the parallel strategies,
// reject the infeasible ones with a reason, and predict TTFT, TPOT, throughput, the
// comm/compute breakdown and memory per device of the rest; ranked best first.
// Pure functions of their inputs (no I/O, no MPI).
//
// A strategy over W = nodes * devices_per_node devices:
//   attention: TP over attn_tp devices (heads split, row-parallel o_proj + all-reduce),
//              DP over attn_dp = W / attn_tp replicas (each serves its share of sequences);
//   MoE:       TP over moe_tp devices (every expert's intermediate dim split) x EP over
//              moe_ep = W / moe_tp devices (experts split). Kinds:
//                pure TP  moe_tp = W (no all-to-all),
//                pure EP  moe_tp = 1 (any attn_tp: tokens sliced over the attention TP group
//                         before the dispatch, all-gathered after the combine),
//                hybrid   attn_tp = moe_tp inside a node, EP across: AR then A2A (fused off) or
//                         MixServe's RS -> A2A -> AG with node-local collectives overlapping
//                         the cross-node all-to-all (fused on).
//   Dense layers (DeepSeek's first_k_dense_replace) and shared experts follow attention's TP
//   (resp. the MoE TP).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/model/config.h"
#include "moe/planner/hardware_profile.h"
#include "moe/status.h"

namespace moe::planner {

struct Cluster {
  int nodes = 1;
  int devices_per_node = 1;
  int world() const { return nodes * devices_per_node; }
};

struct Workload {
  int64_t batch = 0;          // concurrent requests (batch mode); 0 = use request_rate
  double request_rate = 0;    // requests/s arriving (rate mode, when batch == 0)
  int64_t input_len = 0;      // prompt tokens per request
  int64_t output_len = 0;     // generated tokens per request
  double a2a_skew = 1.0;      // busiest rank's all-to-all rows / the mean (>= 1; from routing stats)
  int activation_bytes = 2;   // bytes per activation element on the wire and in buffers (bf16)
  int kv_bytes = 2;           // bytes per KV-cache value
  int micro_batches = 2;      // fused hybrid: micro-batches whose node-local and cross-node comm overlap
  bool overlap_compute = false;  // two micro-batches overlapping all comm with compute (DualPipe-like)
  int expert_replicas = 0;    // redundant experts per device (weights only; lowers a2a_skew in practice)
  // Attention on the driver's TP group alone (the other groups only join the MoE
  // exchanges with no tokens of their own), as this repository's engine runs --tp/--ep
  // today; false = DP attention (every replica serves its share of the sequences).
  bool driver_only_attention = false;
  // Prefill tokens per attention replica per step (vLLM's max_num_batched_tokens); 0 = all
  // prompts of the batch in one step. TTFT is then the mean over the batch's requests:
  // (steps + 1) / 2 prefill steps.
  int64_t prefill_chunk = 0;
};

struct Strategy {
  int attn_tp = 1, attn_dp = 1;
  int moe_tp = 1, moe_ep = 1;
  bool fused = false;  // hybrid only
  // "attn TP8 x DP2 | MoE hybrid TP8 x EP2 fused" style label.
  std::string label() const;
  // "tp" (moe_ep == 1), "ep" (moe_tp == 1), or "hybrid".
  std::string moe_kind() const;
};

// Seconds of one forward step (all layers, embedding and lm_head), per device.
struct StepCost {
  double attention_s = 0, dense_mlp_s = 0, moe_s = 0, head_s = 0;  // roofline compute
  double intra_comm_s = 0, inter_comm_s = 0;                       // before any overlap
  double comm_s = 0;   // after overlapping node-local with cross-node comm (fused)
  double total_s = 0;  // compute + comm (or their overlap when Workload::overlap_compute)
  double compute_s() const { return attention_s + dense_mlp_s + moe_s + head_s; }
};

// Bytes per device.
struct MemoryUse {
  double weights = 0, expert_replicas = 0, kv_cache = 0, buffers = 0, reserved = 0;
  double total() const { return weights + expert_replicas + kv_cache + buffers + reserved; }
};

struct StrategyResult {
  Strategy strategy;
  bool feasible = true;
  std::string reason;  // why not, when !feasible
  bool out_of_memory = false;  // the reason is memory (memory holds what it would need)
  MemoryUse memory;
  StepCost prefill, decode;
  int64_t batch = 0;       // concurrent requests (given, or from the request rate by Little's law)
  double ttft_s = 0;       // time to first token
  double tpot_s = 0;       // time per output token (decode step, plus prefill share in rate mode)
  double throughput = 0;   // output tokens/s
};

struct PlanResult {
  std::vector<StrategyResult> feasible;    // best first
  std::vector<StrategyResult> infeasible;  // each with its reason
  std::string objective;                   // "throughput" (batch mode) or "latency" (rate mode)
};

// Validates the inputs (InvalidArgument naming the flag: --nodes, --devices-per-node,
// --batch / --request-rate, --input-len, --output-len, and a profile whose devices_per_node
// is smaller than --devices-per-node is allowed: the profile's tiers are per device) and
// evaluates every strategy. An empty `feasible` is not an error here (no_fit_message()).
StatusOr<PlanResult> plan(const ModelConfig& model, const HardwareProfile& hw, const Cluster& cluster,
                          const Workload& work);

// Evaluates one strategy (feasibility, memory, times). plan() calls it for each.
StrategyResult evaluate_strategy(const ModelConfig& model, const HardwareProfile& hw, const Cluster& cluster,
                                 const Workload& work, const Strategy& s);

// When nothing fits: what memory the smallest-footprint strategy would need per device
// against the capacity, and how many devices of this kind would hold the weights.
std::string no_fit_message(const PlanResult& r, const HardwareProfile& hw, const Cluster& cluster);

}  // namespace moe::planner
