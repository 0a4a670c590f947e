// moe bench a2a, the measurement half: synthetic routings and layers, and timed runs of
// our EP layer, of its rows through raw MPI, of the naive layout through plain
// MPI_Alltoallv, and of memcpy. The command (flags, table) is bench_a2a_cmd.cc.
// Collective: every rank calls each function in the same order. Times in seconds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/moe/ep_moe_layer.h"

namespace moe::cli {

struct A2aFlags {
  std::vector<int> hidden = {1024, 4096};
  std::vector<int> tokens = {16, 64, 256};
  std::vector<std::string> routing = {"uniform", "zipf"};
  int experts = 64;
  int num_topk = 8;               // --num-topk (old spelling --top-k): experts per token
  bool both_topk_spellings = false;  // both --num-topk and --top-k given (an error)
  double zipf_s = 1.2;
  int repeats = 10;
  int warmup = 2;
  int ranks_per_node = -1;  // -1: N/2 when N >= 4, else 0 (one node)
  bool no_overlap = false;
  bool no_bf16 = false;
  int overlap_max_intermediate = 512;
  int overlap_micro_batches = 0;  // EpOptions::micro_batches of the overlap rows (0 = auto)
  int algo_hidden = 4096;
  int algo_tokens = 256;
  int threads = 1;
  int64_t seed = 1;
  double timeout = 120;
  std::string stat = "median";  // or "min": the statistic over repeats
};

// A layer whose experts all view one shared set of f32 matrices (only the experts
// placed on this rank are marked loaded). With intermediate 1 the GEMMs are nearly free;
// the FFN's gather and weighted scatter of the received rows remain.
struct SyntheticLayer {
  ModelConfig config;
  LayerWeights layer;
  std::vector<float> w1, w2, w3;
};

struct LayerRun {
  // Each a statistic (stat_of: median, or min) over the repeats.
  double call = 0;      // the slowest rank's whole call
  double exchange = 0;  // slowest call - slowest expert compute: the exchange's critical path
  double compute = 0;   // the slowest rank's expert compute
  double wait = 0;      // the slowest rank's EpTimings.comm_wait_seconds
  int64_t bytes = 0;    // bytes sent by all ranks in one call (dispatch + combine)
  double ratio = 0;     // EpTimings::comm_overlap_ratio, the lowest rank's (0 for blocking exchanges)
};

struct Problem {
  const A2aFlags* f = nullptr;
  Communicator* comm = nullptr;
  ExpertPlacement placement;
  int hidden = 0, tokens = 0;
  std::vector<float> x;
  mutable std::vector<float> out;  // the layer's output, scratch
  std::vector<int> idx;
  std::vector<float> w;
};

struct WireRun {
  double time = 0;       // counts MPI_Alltoall + dispatch and combine MPI_Alltoallv
  double with_pack = 0;  // the same plus packing the rows and summing the returned rows (plain only)
  int64_t bytes = 0;     // all ranks, both directions
};

// Bytes crossing node boundaries in one call (all ranks, dispatch + combine), f32, for
// plain (one row per remote-node assignment), flat (one row per (token, remote-node
// rank)) and hierarchical (one row per (token, remote node)).
struct CrossNode {
  int64_t plain = 0, flat = 0, hier = 0;
};

// --stat min: report the best repeat instead of the median.
void set_stat_min(bool on);
double stat_of(std::vector<double> v);
std::vector<double> max_over_ranks(std::vector<double> v);
int64_t sum_over_ranks(int64_t v);
int adapt_repeats(double last_warmup_seconds, int base);
[[noreturn]] void die(int rank, const std::string& what, const Status& st);
void make_routing(const std::string& kind, double s, int num_tokens, int num_experts, int num_topk, uint64_t seed, std::vector<int>* idx, std::vector<float>* w);
std::unique_ptr<SyntheticLayer> make_layer(int hidden, int intermediate, int num_experts, int num_topk, const ExpertPlacement& placement, int rank);
LayerRun run_layer(const Problem& p, const SyntheticLayer& sl, const EpOptions& opt, int warmup, int repeats, const char* what);
WireRun time_wire(const std::vector<int>& send_cnt, int64_t send_row, int64_t back_row, int warmup, int repeats);
WireRun run_ours_wire(const Problem& p, int warmup, int repeats);
WireRun run_plain(const Problem& p, int warmup, int repeats);
double memcpy_bandwidth(int64_t bytes);
CrossNode cross_node_bytes(const Problem& p);
int64_t estimate_memory(const Problem& p);
int64_t mem_available_bytes();

}  // namespace moe::cli
