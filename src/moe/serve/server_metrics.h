// The server's metrics (vLLM-like names, prefix "moe:") on a MetricsRegistry:
//   moe:http_requests_total{endpoint,status}              counter, every HTTP response
//   moe:request_success_total{finished_reason}            counter, finished generations
//   moe:num_requests_running / moe:num_requests_waiting   gauges (GenerationService::snapshot)
//   moe:time_to_first_token_seconds                       histogram, arrival -> first token
//   moe:inter_token_latency_seconds                       histogram, between a request's
//                                                          token events (one per engine step)
//   moe:e2e_request_latency_seconds                       histogram, arrival -> last event
//   moe:prompt_tokens_total / moe:generation_tokens_total counters (engine totals)
//   moe:kv_cache_usage_perc                               gauge, fraction of KV blocks used [0, 1]
//   moe:kv_cache_blocks_total / moe:kv_cache_blocks_used  gauges
//   moe:engine_steps_total                                counter
//   moe:expert_routed_tokens_total{layer,expert}          counter, routed assignments
//   moe:worker_failures_total / moe:recoveries_total /     counters of the supervisor
//   moe:replayed_requests_total                            (`moe serve --supervise`; 0 otherwise)
//   moe:recovery_seconds                                  histogram, worker failure -> serving again
//   moe:failovers_total, moe:rank_failures_total          counters, failover without a restart
//   moe:lost_experts                                      gauge, (layer, expert) pairs with no live replica
//   moe:degraded_tokens_total                             counter, tokens rerouted from a lost expert
//   moe:failover_seconds                                  histogram, rank failure -> serving on survivors
// Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>

#include "moe/generation_service.h"
#include "moe/serve/prometheus.h"

namespace moe::serve {

class ServerMetrics {
 public:
  ServerMetrics();
  void count_http(const std::string& endpoint, int status);
  void count_finished(const std::string& finish_reason);
  Histogram& ttft() { return *ttft_; }
  Histogram& inter_token() { return *itl_; }
  Histogram& e2e() { return *e2e_; }
  // Copies the engine's counters in, then renders the whole registry.
  std::string render(const ServiceSnapshot& snapshot);
  MetricsRegistry& registry() { return registry_; }

 private:
  MetricsRegistry registry_;
  Histogram* ttft_;
  Histogram* itl_;
  Histogram* e2e_;
  Histogram* recovery_;
  std::mutex recovery_mu_;
  size_t recoveries_observed_ = 0;  // entries of ServiceSnapshot::recovery_seconds observed
  Histogram* failover_;
  size_t failovers_observed_ = 0;  // entries of ServiceSnapshot::failover_seconds observed
};

}  // namespace moe::serve
