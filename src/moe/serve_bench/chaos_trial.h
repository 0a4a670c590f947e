// One run of `moe bench chaos`'s workload against a freshly started server, with at most
// one fault injected: start the server (its own process group), send the workload
// (`concurrency` requests in flight), inject the fault at its point of the workload,
// watch for hangs and recovery, then end every process the run started, whatever
// happened. The fault-free reference run is the same with no fault.
//
// Recovery time: none when the server's main process is gone; else from the results
// (recovery_from_results: the end of the longest silence after the fault in the tokens
// of completed requests, provided the last request to finish completed); else /health
// failing and then answering 200 again. Processes: every descendant of this process (make it a child subreaper so
// that orphans stay descendants) and every member of the server's process group.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "moe/serve_bench/chaos_report.h"
#include "moe/serve_bench/chaos_workload.h"
#include "moe/status.h"

namespace moe::serve_bench {

struct ChaosRunOptions {
  std::vector<std::string> server_command;  // the full command line (mpirun ... moe serve ...)
  int num_ranks = 2;                 // --ep
  bool supervised = false;           // the command is the supervised front end
  int concurrency = 4;
  double hang_seconds = 30;          // no progress this long with requests outstanding: a hang
  double stop_seconds = 5;           // SIGSTOP length
  double start_timeout_seconds = 120;
  double exit_grace_seconds = 10;    // a server that ended: how long its processes get to go
  double min_outage_seconds = 0.25;  // a shorter silence after the fault is not an outage
  std::string log_path;              // the server's output goes there too when set
};

// The fault of one trial. `target`: a rank in [0, num_ranks), or num_ranks for the
// front end (supervised only).
struct FaultPlan {
  std::string kind = "none";         // none, kill, stop, corrupt
  // When: once this fraction of the workload's streamed output (max_tokens per streamed
  // request) has been delivered (ChaosProgress::delivered_tokens), so that the fault
  // falls at the same point of the workload however fast the machine runs it (with no
  // streamed request: once this fraction of the requests has finished).
  double at_fraction = 0.5;
  int target = 0;
  std::string corrupt_file;          // corrupt: the shard file to damage
  long corrupt_offset = 0;           // corrupt: the byte to flip (restored after the trial)
};

using ChaosLogFn = std::function<void(const std::string& line)>;

// Runs one trial. Never throws; a server that does not start is `setup_error`.
ChaosTrial run_chaos_trial(const ChaosRunOptions& options, const std::vector<ChaosRequest>& requests,
                           const FaultPlan& plan, int trial_number, const ChaosLogFn& log);

// The expert shard files of a store (STORE/CURRENT -> its manifest's shards of kind
// "expert"), as paths. NotFound / DataLoss naming the file when the store is not readable.
StatusOr<std::vector<std::string>> expert_shard_files(const std::string& store_dir);

// XORs the byte at `offset` of `path` with 0xFF (twice restores it). Errors name the file.
Status flip_byte(const std::string& path, long offset);

}  // namespace moe::serve_bench
