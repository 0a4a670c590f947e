// The flags that open an Engine, shared by `moe generate` and `moe serve`: model,
// threads, expert parallelism under mpirun, capacity policy, expert placement and
// rebalancing, batch-invariant kernels, FP8 weights (--fp8).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "moe/engine.h"
#include "moe/engine_options.h"
#include "moe/launch.h"
#include "moe/status.h"

namespace moe::cli {

struct EngineFlags {
  // Flags that map one to one land here (--model: empty = default_model_dir()).
  EngineOptions options;
  EpLaunchOptions launch;  // --ep, --tp, --ranks-per-node
  // Spellings mapped onto options by launch_engine_from_flags().
  std::string a2a_dtype = "f32";   // f32 | bf16 -> options.a2a_bf16
  std::string a2a_mode = "auto";   // auto | flat | hierarchical -> options.a2a_hierarchical
  double capacity_factor = 1.0;    // -> options.capacity_factor when --capacity-factor is given
  std::string fp8 = "dequant";     // dequant | native -> options.fp8_mode
  std::string fused_moe = "on";    // on | off -> options.fused_moe
  std::string dp_attention = "off";  // DP-attention: on | off -> options.dp_attention
  bool skip_weight_check = false;  // --skip-weight-check -> !options.check_weights_finite
  const CLI::Option* ep_option = nullptr;  // --ep (not given with --tp K: EP size = ranks / K)
  const CLI::Option* capacity_option = nullptr;  // set by add_engine_flags
  const CLI::Option* comm_timeout_option = nullptr;  // --comm-timeout (-> launch.comm_timeout_seconds)
  const CLI::Option* gloo_host_option = nullptr;  // --gloo-host
  const CLI::Option* failover_wait_option = nullptr;  // --failover-wait
  const CLI::Option* failover_join_option = nullptr;  // --failover-join
  // Adaptive top-k: --min-k / --max-k land in options; given-ness for the checks.
  double adaptive_k_target = 1.0;  // -> options.adaptive_k_target when --adaptive-k-target is given
  const CLI::Option* min_k_option = nullptr;
  const CLI::Option* max_k_option = nullptr;
  const CLI::Option* adaptive_k_target_option = nullptr;
  bool given(const CLI::Option* o) const { return o != nullptr && o->count() > 0; }
  // YAML config (config_apply.h): --config FILE, applied by main() after parsing.
  std::string config_file;
  bool ep_given() const { return ep_option != nullptr && ep_option->count() > 0; }
  // The world size the flags ask for: --tp x --ep (--ep alone without --tp).
  int world_size() const { return launch.tp * launch.ep; }
  bool failover_wait_given() const { return failover_wait_option != nullptr && failover_wait_option->count() > 0; }
  bool failover_join_given() const { return failover_join_option != nullptr && failover_join_option->count() > 0; }
  bool gloo_host_given() const { return gloo_host_option != nullptr && gloo_host_option->count() > 0; }
  bool capacity_given() const { return capacity_option != nullptr && capacity_option->count() > 0; }
  bool comm_timeout_given() const { return comm_timeout_option != nullptr && comm_timeout_option->count() > 0; }
  // The idle heartbeat rank 0 sends the EP workers: min(5, --comm-timeout / 4) seconds.
  double idle_heartbeat_seconds() const;
};

// Registers the flags on `app` (values land in *f, which must outlive parsing).
// `batch_invariant_default` is --batch-invariant's default (true for serve).
void add_engine_flags(CLI::App& app, EngineFlags* f, bool batch_invariant_default);

// Checks the values; returns "" when fine, else a message naming the flag.
std::string check_engine_flags(const EngineFlags& f);

// A command's failure on EP rank `rank` (< 0: the message names it already, e.g.
// launch_engine's): prints "error: [rank R: ]<message>" and
// returns 1. A communication failure (Unavailable, DeadlineExceeded) under mpirun
// leaves the group unusable and MPI_Finalize would wait for the lost peer forever, so
// it says so and ends every rank of the job at once (mpi_abort(); never returns).
int fail_rank(int rank, const Status& status);

// The --comm-backend value on a command line (parsed or not), "mpi" if absent: main()
// starts MPI only for a backend that uses it (launch.h: backend_uses_mpi).
std::string requested_comm_backend(int argc, char** argv);

// The EngineOptions and EP launch the flags describe, opened with launch_engine()
// (include/moe/launch.h; collective under mpirun). `command` ("generate", "serve") is
// named in the hint for a missing mpirun.
StatusOr<LaunchedEngine> launch_engine_from_flags(const EngineFlags& f, const std::string& command);

// --trace: Engine::write_trace() (collective: every rank, after run_worker()
// returned or, on rank 0, after stop_workers()); prints where it wrote on rank 0. 0, or
// fail_rank()'s 1.
int write_trace_or_fail(Engine& engine, int rank, const std::string& path);

}  // namespace moe::cli
