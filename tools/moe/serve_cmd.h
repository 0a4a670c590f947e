// `moe serve`'s flags and the pieces shared by its three modes: plain (serve_cmd.cc), the
// supervisor's front end (--supervise) and the supervised worker group
// (--worker-endpoint), both in serve_supervise_cmd.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine_flags.h"
#include "moe/scheduler.h"
#include "moe/serve/chat_template.h"
#include "moe/serve/http_server.h"

namespace moe::cli {

struct ServeFlags {
  EngineFlags engine;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> api_keys;
  std::string served_model_name;
  int max_num_seqs = 32;
  int max_num_batched_tokens = 512;
  int kv_block_size = 16;
  int64_t kv_cache_tokens = 0;
  int64_t kv_cache_memory_bytes = 0;  // --kv-cache-memory-bytes (vLLM's)
  double memory_utilization = 0.9;    // --memory-utilization / --gpu-memory-utilization
  bool enable_prefix_caching = false, no_enable_prefix_caching = false;  // default: on
  bool kv_reserve_max_tokens = false;
  std::string kv_offload_dir;                 // --kv-offload-dir: the disk tier of cached blocks
  int64_t kv_offload_bytes = 0;               // --kv-offload-bytes; 0 = 4 GiB (with --kv-offload-dir)
  int max_tokens_limit = 0;
  int max_n = 16;  // largest `n` (choices per prompt) a request may ask for
  int64_t max_body_bytes = 1 << 20;
  double header_timeout = 10;                // --header-timeout (slow clients)
  int64_t max_connections_per_client = 1024;  // --max-connections-per-client; 0 = no cap
  double rate_limit_rps = 0;
  double rate_limit_tpm = 0;
  std::string chat_template;
  // CORS (src/moe/serve/cors.h): comma lists, repeatable; no origins = off.
  std::vector<std::string> allowed_origins, allowed_methods, allowed_headers;
  bool allowed_credentials = false;
  double shutdown_grace = 30;
  double liveness_timeout = 10;  // when not given: min(10, --comm-timeout / 2)
  const CLI::Option* liveness_option = nullptr;
  double effective_liveness_timeout() const {
    if (liveness_option != nullptr && liveness_option->count() > 0) return liveness_timeout;
    // --comm-backend gloo: a step may wait a whole --comm-timeout for a stopped peer,
    // then fail over (re-forming waits the --failover-join window for the survivors),
    // plus 2 s of margin: only past that is it stalled.
    if (engine.launch.comm_backend == "gloo") {
      return engine.launch.comm_timeout_seconds + engine.options.failover_join_seconds + 2;
    }
    return std::min(10.0, engine.launch.comm_timeout_seconds / 2);
  }
  // --supervise: the front end here, the engine in a worker group it restarts.
  bool supervise = false;
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;
  double recovery_timeout = 60;
  int max_restarts = 3;
  double startup_timeout = 600;
  // Internal: what the supervisor starts the worker group with.
  std::string worker_endpoint;  // rendezvous directory
  int supervisor_pid = 0;
  std::vector<const CLI::Option*> supervise_only;  // flags that need --supervise
};

// "" when the serving flags are fine, else a message naming the flag. check_engine:
// also check_engine_flags().
std::string check_serve_flags(const ServeFlags& f, bool check_engine);
serve::ServerOptions server_options(const ServeFlags& f, const serve::ChatTemplate& chat_template);
SchedulerOptions scheduler_options(const ServeFlags& f);

// serve_supervise_cmd.cc
void add_supervise_flags(CLI::App& app, ServeFlags* f);
std::string check_supervise_flags(const ServeFlags& f);
// `moe serve --supervise`: `app` is the serve subcommand (its given engine flags are
// passed on to the worker group).
int run_supervised_serve(const ServeFlags& f, const CLI::App& app);
// `moe serve --worker-endpoint DIR` on every rank of a supervised worker group.
int run_worker_endpoint(const ServeFlags& f);

// An EP rank other than 0 of `moe serve` (plain or worker group): follows rank 0 until it
// stops the workers, ignoring SIGTERM/SIGINT (rank 0 drains and stops them; a signal
// mpirun forwards must not end them first), then joins the --trace gather (`trace_path`
// non-empty; rank 0 joins it after stopping the workers). Returns the process exit code.
int run_serve_worker_rank(Engine& engine, int rank, const std::string& trace_path = "");

// Rank 0: releases the workers when it leaves scope, on every path.
struct StopWorkersOnExit {
  Engine* engine;
  ~StopWorkersOnExit() { (void)engine->stop_workers(); }
};

}  // namespace moe::cli
