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
//   moe:num_preemptions_total, moe:prefix_cache_queries_total, moe:prefix_cache_hits_total
//                                                          counters (as vLLM's below)
//   moe:kv_disk_hits_total / _hit_bytes_total / _writes_total / _write_bytes_total /
//   moe:kv_disk_rejects_total / _write_failures_total     counters, the KV disk tier
//   moe:expert_routed_tokens_total{layer,expert}          counter, routed assignments
//   moe:worker_failures_total / moe:recoveries_total /     counters of the supervisor
//   moe:replayed_requests_total                            (`moe serve --supervise`; 0 otherwise)
//   moe:recovery_seconds                                  histogram, worker failure -> serving again
//   moe:failovers_total, moe:rank_failures_total          counters, failover without a restart
//   moe:lost_experts                                      gauge, (layer, expert) pairs with no live replica
//   moe:degraded_tokens_total                             counter, tokens rerouted from a lost expert
//   moe:failover_seconds                                  histogram, rank failure -> serving on survivors
//   moe:adaptive_k_tokens_total / moe:adaptive_k_shed_total   counters, adaptive top-k: token
//                                                          routings that shed experts, assignments shed
//   moe:requeued_assignments_total                        counter, adaptive_requeue second-round runs
//   moe:http_connections_admitted_total                   counter, connections the gate took in
//   moe:http_connections_refused_total{reason}            counter, refused at accept: "per_client_cap"
//                                                          (--max-connections-per-client; 429, closed)
//   moe:http_connections_closed_total{reason}             counter, closed by the gate: "header_timeout"
//                                                          (no whole request head within --header-timeout),
//                                                          "keep_alive_idle" (idle past the keep-alive timeout)
//   moe:http_connections_waiting                          gauge, connections waiting in the gate for a head
//                                                          (connection_gate.h)
//
// And vLLM's names (prefix "vllm:", label model_name = the served model name), so that
// vLLM's Grafana dashboard (examples/observability/prometheus_grafana/grafana.json)
// works unchanged; registered by set_model_name():
//   vllm:num_requests_running / _waiting / _swapped (0)   gauges
//   vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc   gauges, fraction of KV blocks used [0, 1]
//   vllm:cpu_cache_usage_perc                             gauge, 0 (no CPU swap space)
//   vllm:prompt_tokens_total / vllm:generation_tokens_total   counters
//   vllm:num_preemptions_total                            counter, sequences preempted (recomputed later)
//   vllm:prefix_cache_queries_total / _hits_total         counters, prompt tokens looked up / found cached
//   vllm:request_success_total{finished_reason}           counter
//   vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
//   vllm:time_per_output_token_seconds (vLLM's older name of the same),
//   vllm:e2e_request_latency_seconds                      histograms, copies of the moe: ones
//   vllm:request_queue_time_seconds / _prefill_time_seconds / _decode_time_seconds /
//   vllm:request_inference_time_seconds                   histograms, the engine's per-request
//                                                          timings (SeqEvent::queue_seconds ...)
//   vllm:request_time_per_output_token_seconds            histogram, decode time / (tokens - 1)
//   vllm:request_prompt_tokens / _generation_tokens       histograms per finished sequence
//   vllm:request_max_num_generation_tokens                histogram, generated tokens of a
//                                                          finished sequence (n = 1: the request)
//   vllm:request_params_n / vllm:request_params_max_tokens   histograms per request
//   vllm:iteration_tokens_total                           histogram, tokens per engine step
// Thread-safe, except set_model_name() (once, before serving).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "moe/generation_service.h"
#include "moe/serve/connection_gate.h"
#include "moe/serve/prometheus.h"

namespace moe::serve {

class ServerMetrics {
 public:
  ServerMetrics();
  ~ServerMetrics();
  void count_http(const std::string& endpoint, int status);
  void count_finished(const std::string& finish_reason);
  // Registers the vllm: families with label model_name = `model_name`; token-count
  // buckets 1, 2, 5, 10, 20, 50 ... up to `max_model_len` (vLLM's). Call once, before
  // serving.
  void set_model_name(const std::string& model_name, int max_model_len);
  // A sequence's final event (its timings and token counts); events ending in "error"
  // are not observed. No-op before set_model_name().
  void observe_finished(const SeqEvent& final_event);
  // One accepted generation request's parameters. No-op before set_model_name().
  void observe_request_params(int n, int max_tokens);
  Histogram& ttft() { return *ttft_; }
  Histogram& inter_token() { return *itl_; }
  Histogram& e2e() { return *e2e_; }
  // Mirrors the connection gate's counters (ConnectionGate::counters(), cumulative).
  void set_connection_gate(const ConnectionGate::Counters& gate);
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

  // vllm: families (null before set_model_name()).
  Labels model_;
  struct Vllm;
  std::unique_ptr<Vllm> vllm_;
  void render_vllm(const ServiceSnapshot& s);
};

}  // namespace moe::serve
