// Prefix-reuse figures of `moe bench serve` (multi-turn and shared-prefix workloads,
// workload.h), from the per-request records:
//   cached / prompt tokens  sums over successful requests of the server's
//                           usage.prompt_tokens_details.cached_tokens (0 when a response
//                           does not report it) and usage.prompt_tokens (else the
//                           client's count)
//   prefix hit rate         cached / prompt tokens, over all requests and over the
//                           "later" ones: turns 2+ of multi-turn, every request but the
//                           first of shared-prefix (the first has nothing to reuse)
//   TTFT by turn            median and p99 of turn 1 and of turns 2+ (multi-turn)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe/serve_bench/request_output.h"
#include "moe/serve_bench/serving_metrics.h"
#include "moe/serve_bench/workload.h"

namespace moe::serve_bench {

struct PrefixReuse {
  long long cached_tokens = 0, prompt_tokens = 0;              // all successful requests
  long long cached_tokens_later = 0, prompt_tokens_later = 0;  // the later ones
  int responses = 0, responses_later = 0;                      // successful requests
  int cached_reported = 0;  // responses that carried cached_tokens
  // cached / prompt; 0 when there are no prompt tokens.
  double hit_rate() const;
  double hit_rate_later() const;
};
// later[i]: outputs[i] is a later request (sizes equal; a missing entry reads false).
PrefixReuse prefix_reuse(const std::vector<RequestOutput>& outputs, const std::vector<bool>& later);

struct TurnTtft {
  MetricStats turn1, later;  // percentiles {99}
};
TurnTtft turn_ttft(const std::vector<RequestOutput>& outputs, const std::vector<bool>& later);

struct ReuseReport {
  Workload workload = Workload::kSingle;
  int num_conversations = 0;      // multi-turn
  int turns = 0;                  // multi-turn
  double think_time_s = 0;        // multi-turn
  int conversations_stopped_early = 0;      // the next turn would not fit max_model_len
  int conversations_ended_by_failure = 0;   // a turn failed
  int shared_prefix_tokens = 0;   // shared-prefix
  PrefixReuse reuse;
  TurnTtft ttft;
};

// The "Prefix reuse" section printed after vLLM's table (multi-turn, shared-prefix),
// ending with a note when no response reported cached_tokens.
std::string format_reuse_report(const ReuseReport& report);
// workload, turns, ..., ttft_turn1_ms_median, ttft_turn1_ms_p99, ttft_later_ms_median,
// ttft_later_ms_p99, cached_tokens, prompt_tokens, cached_tokens_later,
// prompt_tokens_later, prefix_hit_rate, prefix_hit_rate_later, cached_tokens_reported;
// the keys of another workload are null. For single: workload and the totals only.
nlohmann::json reuse_json(const ReuseReport& report);

}  // namespace moe::serve_bench
