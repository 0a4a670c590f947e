// `moe bench chaos`'s figures: per trial (what each request got against the fault-free
// reference run, hang, recovery time, what the server's processes did) and in total,
// rendered as a table and as JSON. Pure functions of the recorded results.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe/serve_bench/chaos_workload.h"

namespace moe::serve_bench {

// One trial: one fault injected into one server run of the whole workload.
struct ChaosTrial {
  int trial = 0;                 // 1-based
  std::string fault;             // kill, stop, corrupt
  std::string target;            // "rank 1", "front end"; "" when no target was found
  bool front_end = false;        // the front end itself was killed (its clients die with it)
  double fault_at_s = -1;        // when it was injected (seconds since the workload began); -1: never
  std::string setup_error;       // the trial could not run (the server did not start, ...)
  std::vector<ChaosResult> results;  // per request, in workload order
  bool hang = false;             // no progress for --hang-seconds with requests outstanding
  double hang_at_s = -1;
  // Fault -> serving again (chaos_trial.h says how it is measured); nullopt: never,
  // e.g. the server ended.
  std::optional<double> recovery_s;
  std::string server_end;        // "running" at the end of the workload, else how it ended
  int stragglers = 0;            // server processes still alive --exit-grace after it ended
  int leftover = 0;              // processes still alive after the harness killed them all
  std::map<std::string, double> fault_metrics;  // /metrics fault counters (name -> value)
  std::string corrupt_shard;     // corrupt: the shard file damaged
  bool corrupt_reported = false; // corrupt: the server's output names that file
};

// The request counts of one trial (or a sum of trials).
struct ChaosCounts {
  int requests = 0, completed = 0, errored = 0, lost = 0, refused = 0;
  int greedy_completed = 0, greedy_equal = 0;
  int seeded_completed = 0, seeded_equal = 0;
  void add(const ChaosCounts& o);
};

// Counts `results` against `reference` (the fault-free text of each request, same
// order); a completed request is "equal" when its text equals the reference exactly.
ChaosCounts count_results(const std::vector<ChaosRequest>& requests, const std::vector<ChaosResult>& results,
                          const std::vector<std::string>& reference);

// Recovery time from the token arrivals (all requests, any order) and the fault time:
// the end of the longest silence after the fault (measured from the fault itself) minus
// the fault time, when that silence is at least `min_outage_s`; 0 when tokens kept coming
// with no such silence; nullopt when no token came after the fault.
std::optional<double> recovery_from_tokens(std::vector<double> token_times_s, double fault_at_s,
                                           double min_outage_s);

// A trial's recovery from its results: recovery_from_tokens over the tokens of the
// requests that completed (a request that was then cut or failed was not served), and
// nullopt unless the request that finished last completed (the server was serving again
// at the end, not just flushing what it had before the fault).
std::optional<double> recovery_from_results(const std::vector<ChaosResult>& results, double fault_at_s,
                                            double min_outage_s);

// The fault counters of a Prometheus text exposition: every sample whose metric name
// contains "failure", "recover", "replay", "degraded", "failover" or "lost_experts"
// (labels summed per name; a
// histogram's _bucket samples are skipped, its _sum and _count kept).
std::map<std::string, double> parse_fault_metrics(const std::string& exposition);

struct ChaosSummary {
  int trials = 0;
  ChaosCounts rank_faults;       // trials whose fault hit a rank (or nothing)
  ChaosCounts front_end_kills;   // trials that killed the front end
  int front_end_trials = 0;
  int hangs = 0;
  int setup_errors = 0;
  int trials_with_stragglers = 0;
  int trials_with_leftovers = 0;
  int recovered = 0;             // trials with a recovery time
  double recovery_p50_s = 0, recovery_max_s = 0;
  int corrupt_trials = 0, corrupt_reported = 0;
  std::map<std::string, double> fault_metrics;  // the trials' /metrics fault counters, summed
};

ChaosSummary summarize(const std::vector<ChaosTrial>& trials, const std::vector<ChaosRequest>& requests,
                       const std::vector<std::string>& reference);

// The table printed at the end: one row per trial (with how the server came back,
// "failover" / "restart" / "both", and its degraded tokens, from its /metrics), then the totals.
std::string render_chaos_table(const std::vector<ChaosTrial>& trials, const std::vector<ChaosRequest>& requests,
                               const std::vector<std::string>& reference);

// {"trials": [...], "totals": {...}} (config is added by the caller).
nlohmann::json chaos_json(const std::vector<ChaosTrial>& trials, const std::vector<ChaosRequest>& requests,
                          const std::vector<std::string>& reference);

}  // namespace moe::serve_bench
