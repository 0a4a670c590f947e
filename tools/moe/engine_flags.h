// The flags that open an Engine, shared by `moe generate` and `moe serve`: model,
// threads, expert parallelism under mpirun, capacity policy, expert placement and
// rebalancing, batch-invariant kernels.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "moe/comm/communicator.h"
#include "moe/engine.h"
#include "moe/status.h"

namespace moe::cli {

struct EngineFlags {
  std::string model;  // empty: default_model_dir()
  int threads = 0;
  int ep = 1;
  int ranks_per_node = 0;
  bool ep_overlap = false;
  std::string a2a_dtype = "f32";
  std::string a2a_mode = "auto";
  int max_nodes_per_token = 0;
  double capacity_factor = 1.0;
  std::string overflow_policy;  // empty: drop when --capacity-factor is given, else dropless
  double stats_ema_decay = 0.9;
  std::string placement;
  int rebalance_every = 0;
  int slots_per_rank = 0;
  int replica_cap = 4;
  double rebalance_min_gain = 0.1;
  int test_corrupt_migration_rank = -1;
  bool batch_invariant = false;
  const CLI::Option* capacity_option = nullptr;  // set by add_engine_flags
  bool capacity_given() const { return capacity_option != nullptr && capacity_option->count() > 0; }
};

// Registers the flags on `app` (values land in *f, which must outlive parsing).
// `batch_invariant_default` is --batch-invariant's default (true for serve).
void add_engine_flags(CLI::App& app, EngineFlags* f, bool batch_invariant_default);

// Checks the values; returns "" when fine, else a message naming the flag.
std::string check_engine_flags(const EngineFlags& f);

// The engine of this process and, under mpirun, its communicator (destroyed after the
// engine).
struct OpenedEngine {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Engine> engine;
  int rank = 0;
};

// Creates the MPI communicator when launched under mpirun (its size must equal --ep)
// and opens the engine (collective under EP). Errors name the flag, or the rank.
// `command` ("generate", "serve") is named in the hint for a missing mpirun.
StatusOr<OpenedEngine> open_engine(const EngineFlags& f, const std::string& command);

}  // namespace moe::cli
