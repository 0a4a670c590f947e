#include "moe/serve/server_metrics.h"

namespace moe::serve {
namespace {

// Bucket bounds in seconds (vLLM's, trimmed).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kItlBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                         0.3,   0.4,   0.5,  0.75,  1.0,  2.5,   5.0, 7.5,  10.0};
const std::vector<double> kRecoveryBuckets = {0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0};
const std::vector<double> kE2eBuckets = {0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                                         50.0, 60.0, 120.0, 240.0, 480.0, 960.0};

}  // namespace

ServerMetrics::ServerMetrics() {
  // Families that must appear from the start (in this order).
  registry_.counter("moe:http_requests_total", "HTTP responses by endpoint and status code.",
                    {{"endpoint", "/v1/completions"}, {"status", "200"}});
  registry_.counter("moe:request_success_total", "Finished generation requests by finish reason.",
                    {{"finished_reason", "stop"}});
  registry_.counter("moe:request_success_total", "", {{"finished_reason", "length"}});
  registry_.gauge("moe:num_requests_running", "Requests in the running batch.");
  registry_.gauge("moe:num_requests_waiting", "Requests queued, waiting for KV-cache room or a sequence slot.");
  ttft_ = &registry_.histogram("moe:time_to_first_token_seconds", "Time from request arrival to its first token.",
                               kTtftBuckets);
  itl_ = &registry_.histogram("moe:inter_token_latency_seconds",
                              "Time between consecutive token events of a request.", kItlBuckets);
  e2e_ = &registry_.histogram("moe:e2e_request_latency_seconds", "Time from request arrival to its last event.",
                              kE2eBuckets);
  registry_.counter("moe:prompt_tokens_total", "Prompt tokens prefilled.");
  registry_.counter("moe:generation_tokens_total", "Tokens generated.");
  registry_.gauge("moe:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1).");
  registry_.gauge("moe:kv_cache_blocks_total", "KV-cache blocks in the pool.");
  registry_.gauge("moe:kv_cache_blocks_used", "KV-cache blocks in use.");
  registry_.counter("moe:engine_steps_total", "Engine steps run.");
  // The supervisor (moe serve --supervise); zero otherwise.
  registry_.counter("moe:worker_failures_total", "Times the worker group was declared failed (supervisor).");
  registry_.counter("moe:recoveries_total", "Times a relaunched worker group took over (supervisor).");
  registry_.counter("moe:replayed_requests_total", "Requests resubmitted to a relaunched worker group (supervisor).");
  recovery_ = &registry_.histogram("moe:recovery_seconds",
                                   "Time from a worker group failure to serving again (supervisor).", kRecoveryBuckets);
  // Expert-level failover inside the worker group (no restart).
  registry_.counter("moe:failovers_total", "Times the EP group re-formed without failed ranks (no restart).");
  registry_.counter("moe:rank_failures_total", "EP ranks declared failed and left out of the group.");
  registry_.gauge("moe:lost_experts", "(layer, expert) pairs with no live replica now (their tokens are rerouted).");
  registry_.counter("moe:degraded_tokens_total",
                    "Tokens routed to their next-best live expert because an expert they chose was lost.");
  failover_ = &registry_.histogram("moe:failover_seconds",
                                   "Time from a rank failure's detection to serving on the survivors.", kRecoveryBuckets);
}

void ServerMetrics::count_http(const std::string& endpoint, int status) {
  registry_.counter("moe:http_requests_total", "", {{"endpoint", endpoint}, {"status", std::to_string(status)}}).inc();
}

void ServerMetrics::count_finished(const std::string& finish_reason) {
  registry_.counter("moe:request_success_total", "", {{"finished_reason", finish_reason}}).inc();
}

std::string ServerMetrics::render(const ServiceSnapshot& s) {
  registry_.gauge("moe:num_requests_running", "").set(s.running);
  registry_.gauge("moe:num_requests_waiting", "").set(s.waiting);
  registry_.counter("moe:prompt_tokens_total", "").set(static_cast<double>(s.prompt_tokens_total));
  registry_.counter("moe:generation_tokens_total", "").set(static_cast<double>(s.generation_tokens_total));
  registry_.gauge("moe:kv_cache_usage_perc", "")
      .set(s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total) : 0);
  registry_.gauge("moe:kv_cache_blocks_total", "").set(static_cast<double>(s.kv_blocks_total));
  registry_.gauge("moe:kv_cache_blocks_used", "").set(static_cast<double>(s.kv_blocks_used));
  registry_.counter("moe:engine_steps_total", "").set(static_cast<double>(s.steps));
  registry_.counter("moe:worker_failures_total", "").set(static_cast<double>(s.worker_failures));
  registry_.counter("moe:recoveries_total", "").set(static_cast<double>(s.recoveries));
  registry_.counter("moe:replayed_requests_total", "").set(static_cast<double>(s.replayed_requests));
  {
    // The snapshot lists every recovery so far: observe the ones not seen yet.
    std::lock_guard<std::mutex> lock(recovery_mu_);
    for (; recoveries_observed_ < s.recovery_seconds.size(); ++recoveries_observed_) {
      recovery_->observe(s.recovery_seconds[recoveries_observed_]);
    }
  }
  registry_.counter("moe:failovers_total", "").set(static_cast<double>(s.failovers));
  registry_.counter("moe:rank_failures_total", "").set(static_cast<double>(s.ranks_lost));
  registry_.gauge("moe:lost_experts", "").set(static_cast<double>(s.lost_experts));
  registry_.counter("moe:degraded_tokens_total", "").set(static_cast<double>(s.degraded_tokens));
  {
    std::lock_guard<std::mutex> lock(recovery_mu_);
    for (; failovers_observed_ < s.failover_seconds.size(); ++failovers_observed_) {
      failover_->observe(s.failover_seconds[failovers_observed_]);
    }
  }
  for (size_t i = 0; i < s.expert_tokens.size() && i < s.moe_layers.size(); ++i) {
    for (size_t e = 0; e < s.expert_tokens[i].size(); ++e) {
      registry_
          .counter("moe:expert_routed_tokens_total", "Tokens routed to each expert (after the capacity policy).",
                   {{"layer", std::to_string(s.moe_layers[i])}, {"expert", std::to_string(e)}})
          .set(static_cast<double>(s.expert_tokens[i][e]));
    }
  }
  return registry_.render();
}

}  // namespace moe::serve
