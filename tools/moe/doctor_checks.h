// The checks of `moe doctor` (doctor_cmd.cc): each returns pass, warn, fail or skip with
// a figure (the measured or computed number it judged) and, for a skip, the reason.
#pragma once

#include <string>
#include <vector>

#include "moe/model/config.h"
#include "moe/planner/hardware_profile.h"

namespace moe::cli::doctor {

// The config.json of `dir`: a Hugging Face directory or a checkpoint store (moe ckpt).
StatusOr<ModelConfig> load_any_model_config(const std::string& dir);

enum class Verdict { kPass, kWarn, kFail, kSkip };
const char* verdict_name(Verdict v);  // "pass", "warn", "fail", "skip"

struct Check {
  std::string name;    // "mpi_launch", "p2p_bandwidth", ...
  Verdict verdict = Verdict::kSkip;
  std::string figure;  // e.g. "3.1 GB/s measured vs 25.0 GB/s in h100_sxm_8gpu (0.12x)"
};

// The exit status for a list of checks: 0 when every check passed or was skipped, 3 when
// the worst is a warning, 4 when one failed (1 and 2 stay "doctor itself failed" and
// "bad usage", as for every subcommand).
int exit_code(const std::vector<Check>& checks);

// What `moe doctor --probe` (run under mpirun by the doctor) reports: hosts of the ranks,
// and the bandwidths it measured between them.
struct ProbeResult {
  int ranks = 0;
  std::vector<std::string> hosts;  // per rank
  bool same_node_01 = true;        // ranks 0 and 1 on one node (intra_node tier)
  double p2p_bytes = 0, p2p_seconds = 0;  // one way, ranks 0 -> 1
  double a2a_bytes = 0, a2a_seconds = 0;  // what each rank sends (own block included), slowest rank
};
std::string probe_json(const ProbeResult& p);
bool parse_probe_json(const std::string& text, ProbeResult* p);

// The measured bandwidths against `profile` (nullptr: not compared, pass with the figure):
// pass when the measured time is within 1 / 0.7 of the alpha-beta prediction for the same
// bytes (cost_model.h), warn down to 0.3x, fail below.
Check p2p_check(const ProbeResult& probe, const planner::HardwareProfile* profile, const std::string& profile_name);
Check a2a_check(const ProbeResult& probe, const planner::HardwareProfile* profile, const std::string& profile_name);

// Memory per rank for `model_dir` under EP over `ep` ranks (tp 1) with `spare_slots` extra
// expert slots per rank (replicas, at most replica_cap copies of an expert), `seqs`
// sequences of the model's context cached: the planner's memory_use (planner/step_model.h),
// against `available_bytes` per rank: pass below 80%, warn below 100%, fail above.
struct MemoryInput {
  std::string model_dir;
  int ep = 1;
  int slots_per_rank = 0;  // 0 = ceil(experts / ep): no replicas
  int replica_cap = 4;
  int seqs = 32;
  double available_bytes = 0;
};
Check memory_check(const MemoryInput& in);

// `dir` as a checkpoint store (every shard read and hashed) or a Hugging Face directory
// (config.json parsed, every safetensors shard opened and indexed).
Check model_check(const std::string& dir, int threads);

// TCP `port` free to listen on (bind to 0.0.0.0:port and release).
Check port_check(int port);

// GPU (nvidia-smi), NCCL (libnccl in the loader's cache), GPUDirect RDMA (nvidia_peermem
// loaded), InfiniBand (/sys/class/infiniband): each skipped, named with the reason, when
// absent.
std::vector<Check> accelerator_checks();

}  // namespace moe::cli::doctor
