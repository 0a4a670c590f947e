// moe bench moe-layer, the measurement half: synthetic MoE layers with the routers of
// the supported families (random bf16 weights built in memory) and timed runs of each
// stage of the single-process layer, or of ep_moe_forward under mpirun. The command
// (flags, table, JSON) is bench_moe_layer_cmd.cc. Times in seconds.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/capacity.h"
#include "moe/placement/expert_placement.h"

namespace moe::cli {

// A router of one family, as its config.json would set it.
struct RouterPreset {
  std::string name;   // mixtral, qwen2, qwen3, deepseek
  std::string label;  // e.g. "Mixtral-8x7B: softmax top-2 of 8, renormalised"
  RouterConfig router;
};

// The names --router accepts (without "all").
const std::vector<std::string>& router_preset_names();
// The preset for a name from router_preset_names().
RouterPreset router_preset(const std::string& name);

// One MoE layer: a [num_experts, hidden] bf16 router, every expert's w1/w3
// [inter, hidden] and w2 [hidden, inter] bf16, distinct random values per expert
// (uniform, +-1/sqrt(fan_in); router +-3/sqrt(hidden), so logits have a spread of about
// 1), and for noaux_tc a random e_score_correction_bias (uniform +-0.05). Experts for
// which `local` is false get no weights and loaded = false (expert parallelism).
struct BenchLayer {
  ModelConfig config;
  LayerWeights layer;
  std::vector<uint16_t> router_w, expert_w;  // bf16 storage the Weight2D views point into
};
std::unique_ptr<BenchLayer> make_bench_layer(const RouterPreset& preset, int hidden, int inter, uint64_t seed,
                                             const std::function<bool(int expert)>& local = nullptr);

// Medians over the timed iterations (seconds) of the single-process layer's stages.
struct StageTimes {
  double logits = 0;    // router logits GEMM (linear)
  double topk = 0;      // route_topk (+ the full selection order when the policy is reroute)
  double capacity = 0;  // apply_capacity (comm = nullptr)
  double layout = 0;    // group_by_expert alone (dispatch layout; also inside grouped_expert_ffn)
  double ffn = 0;       // grouped_expert_ffn: grouping, gather, expert GEMMs, weighted scatter-add
  double ffn_move = 0;  // grouped_expert_ffn on the same routing with 1-wide experts (~ data movement)
  double total = 0;     // logits + topk + capacity + ffn, timed as one span per iteration
  int iters = 0;        // timed iterations (after one warm-up)
  double dropped = 0;   // dropped / (tokens * top_k) of the last iteration
  double rerouted = 0;  // rerouted / (tokens * top_k)
};

// x: [tokens, hidden] activations. `iters` is a minimum: fast cases repeat up to 10x,
// to about 0.2 s of calls (a scheduler hiccup on a shared machine skews short calls).
StageTimes time_single_layer(const BenchLayer& layer, const BenchLayer& move_layer, const std::vector<float>& x,
                             int tokens, const CapacityOptions& capacity, int iters);

// ep_moe_forward under expert parallelism (every rank routes `tokens` tokens of its
// own): medians over iterations of the slowest rank's call and of the slowest rank's
// EpTimings.compute_seconds / comm_wait_seconds.
struct EpStageTimes {
  double call = 0, compute = 0, wait = 0;
  int iters = 0;
  double dropped = 0;  // global dropped / (global tokens * top_k)
};
// Collective over `comm` (MPI_COMM_WORLD's ranks). Errors: communication errors.
Status time_ep_layer(const BenchLayer& layer, Communicator* comm, const ExpertPlacement& placement,
                     const std::vector<float>& x, int tokens, const CapacityOptions& capacity, int iters,
                     EpStageTimes* out);

// Median of v (v non-empty).
double median_of(std::vector<double> v);

}  // namespace moe::cli
