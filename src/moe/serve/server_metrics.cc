#include "moe/serve/server_metrics.h"

#include <algorithm>
#include <iterator>

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

// vLLM's buckets.
const std::vector<double> kRequestTimeBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,    10.0,   15.0, 20.0,
                                                 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kTpotBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kParamsNBuckets = {1, 2, 5, 10, 20};

// 1, 2, 5, 10, 20, 50, ... up to `max` (vLLM's build_1_2_5_buckets).
std::vector<double> buckets_1_2_5(int max) {
  std::vector<double> out;
  for (double mag = 1;; mag *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * mag > max) return out.empty() ? std::vector<double>{1} : out;
      out.push_back(m * mag);
    }
  }
}

// Per-bucket (not cumulative) counts of a histogram's data, +Inf last.
std::vector<uint64_t> bucket_counts(const Histogram::Data& d) {
  std::vector<uint64_t> out(d.cumulative_counts.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = d.cumulative_counts[i] - (i > 0 ? d.cumulative_counts[i - 1] : 0);
  return out;
}

}  // namespace

struct ServerMetrics::Vllm {
  Histogram *ttft, *itl, *tpot_old, *e2e;
  Histogram *queue, *prefill, *decode, *inference, *tpot;
  Histogram *prompt_tokens, *generation_tokens, *max_generation_tokens, *params_n, *params_max_tokens;
  Histogram* iteration_tokens;
};

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::set_model_name(const std::string& model_name, int max_model_len) {
  model_ = {{"model_name", model_name}};
  auto v = std::make_unique<Vllm>();
  MetricsRegistry& r = registry_;
  r.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", model_);
  r.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", model_);
  r.gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU (always 0: no swapping).", model_);
  r.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", model_);
  r.gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (vLLM's older name). 1 means 100 percent usage.", model_);
  r.gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage (always 0: no CPU swap space).", model_);
  r.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", model_);
  r.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", model_);
  r.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", model_);
  r.counter("vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.", model_);
  r.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", model_);
  for (const char* reason : {"stop", "length", "abort"}) {
    Labels l = model_;
    l.emplace_back("finished_reason", reason);
    r.counter("vllm:request_success_total", "Count of successfully processed requests.", l);
  }
  v->ttft = &r.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                         kTtftBuckets, model_);
  v->itl = &r.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", kItlBuckets,
                        model_);
  v->tpot_old = &r.histogram("vllm:time_per_output_token_seconds",
                             "Histogram of time per output token in seconds (inter-token latency).", kItlBuckets, model_);
  v->e2e = &r.histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
                        kE2eBuckets, model_);
  v->queue = &r.histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                          kRequestTimeBuckets, model_);
  v->prefill = &r.histogram("vllm:request_prefill_time_seconds",
                            "Histogram of time spent in PREFILL phase for request.", kRequestTimeBuckets, model_);
  v->decode = &r.histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                           kRequestTimeBuckets, model_);
  v->inference = &r.histogram("vllm:request_inference_time_seconds",
                              "Histogram of time spent in RUNNING phase for request.", kRequestTimeBuckets, model_);
  v->tpot = &r.histogram("vllm:request_time_per_output_token_seconds",
                         "Histogram of time_per_output_token_seconds per request.", kTpotBuckets, model_);
  const std::vector<double> token_buckets = buckets_1_2_5(std::max(1, max_model_len));
  v->prompt_tokens = &r.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets,
                                  model_);
  v->generation_tokens = &r.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                      token_buckets, model_);
  v->max_generation_tokens = &r.histogram("vllm:request_max_num_generation_tokens",
                                          "Histogram of maximum number of requested generation tokens.", token_buckets,
                                          model_);
  v->params_n = &r.histogram("vllm:request_params_n", "Histogram of the n request parameter.", kParamsNBuckets, model_);
  v->params_max_tokens = &r.histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
                                      token_buckets, model_);
  std::vector<double> iteration_bounds(std::begin(kIterationTokenBounds), std::end(kIterationTokenBounds));
  v->iteration_tokens = &r.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                     iteration_bounds, model_);
  vllm_ = std::move(v);
}

void ServerMetrics::observe_finished(const SeqEvent& ev) {
  if (!vllm_ || ev.finish_reason == "error") return;
  Vllm& v = *vllm_;
  v.queue->observe(ev.queue_seconds);
  v.prefill->observe(ev.prefill_seconds);
  v.decode->observe(ev.decode_seconds);
  v.inference->observe(ev.prefill_seconds + ev.decode_seconds);
  v.tpot->observe(ev.completion_tokens > 1 ? ev.decode_seconds / (ev.completion_tokens - 1) : 0.0);
  v.prompt_tokens->observe(ev.prompt_tokens);
  v.generation_tokens->observe(ev.completion_tokens);
  v.max_generation_tokens->observe(ev.completion_tokens);
}

void ServerMetrics::observe_request_params(int n, int max_tokens) {
  if (!vllm_) return;
  vllm_->params_n->observe(n);
  vllm_->params_max_tokens->observe(max_tokens);
}

void ServerMetrics::render_vllm(const ServiceSnapshot& s) {
  if (!vllm_) return;
  Vllm& v = *vllm_;
  MetricsRegistry& r = registry_;
  r.gauge("vllm:num_requests_running", "", model_).set(s.running);
  r.gauge("vllm:num_requests_waiting", "", model_).set(s.waiting);
  const double usage =
      s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total) : 0;
  r.gauge("vllm:kv_cache_usage_perc", "", model_).set(usage);
  r.gauge("vllm:gpu_cache_usage_perc", "", model_).set(usage);
  r.counter("vllm:prompt_tokens_total", "", model_).set(static_cast<double>(s.prompt_tokens_total));
  r.counter("vllm:generation_tokens_total", "", model_).set(static_cast<double>(s.generation_tokens_total));
  r.counter("vllm:num_preemptions_total", "", model_).set(static_cast<double>(s.preemptions));
  r.counter("vllm:prefix_cache_queries_total", "", model_).set(static_cast<double>(s.prefix_cache_queries));
  r.counter("vllm:prefix_cache_hits_total", "", model_).set(static_cast<double>(s.prefix_cache_hits));
  // Copies of the server's own latency histograms (same buckets).
  const Histogram::Data itl = itl_->data();
  const Histogram::Data ttft = ttft_->data();
  v.ttft->set(bucket_counts(ttft), ttft.sum);
  v.itl->set(bucket_counts(itl), itl.sum);
  v.tpot_old->set(bucket_counts(itl), itl.sum);
  const Histogram::Data e2e = e2e_->data();
  v.e2e->set(bucket_counts(e2e), e2e.sum);
  if (s.iteration_tokens.size() == std::size(kIterationTokenBounds) + 1) {
    v.iteration_tokens->set(std::vector<uint64_t>(s.iteration_tokens.begin(), s.iteration_tokens.end()),
                            static_cast<double>(s.iteration_tokens_sum));
  }
}

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
  registry_.counter("moe:num_preemptions_total", "Running sequences preempted (blocks given back, recomputed later).");
  registry_.counter("moe:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.");
  registry_.counter("moe:prefix_cache_hits_total", "Prompt tokens found in the prefix cache (not computed).");
  // The disk tier of cached KV blocks (--kv-offload-dir); zero without it.
  registry_.counter("moe:kv_disk_hits_total", "KV blocks loaded back from the disk tier.");
  registry_.counter("moe:kv_disk_hit_bytes_total", "Bytes of KV blocks loaded back from the disk tier.");
  registry_.counter("moe:kv_disk_writes_total", "KV blocks written to the disk tier.");
  registry_.counter("moe:kv_disk_write_bytes_total", "Bytes of KV blocks written to the disk tier.");
  registry_.counter("moe:kv_disk_rejects_total",
                    "Disk-tier block files refused (corrupt, truncated, another model or KV layout) and recomputed.");
  registry_.counter("moe:kv_disk_write_failures_total", "Disk-tier writes that failed (e.g. a full disk) or were dropped (writer queue full).");
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
  // Adaptive top-k and the adaptive_requeue overflow policy (moe/capacity.h).
  registry_.counter("moe:adaptive_k_tokens_total",
                    "Token routings (summed over MoE layers) that shed at least one expert under load (adaptive k).");
  registry_.counter("moe:adaptive_k_shed_total", "Expert assignments shed by adaptive k under load.");
  registry_.counter("moe:requeued_assignments_total",
                    "Overflowing assignments run in adaptive_requeue's second round instead of being dropped.");
  registry_.counter("moe:ep_comm_wait_seconds_total",
                    "Time rank 0 was blocked on expert-parallel all-to-all exchanges (0 without EP).");
  registry_.counter("moe:ep_exchange_seconds_total",
                    "Time rank 0's expert-parallel exchanges took from issue to completion (0 without EP).");
  registry_.gauge("moe:comm_overlap_ratio",
                  "Fraction of the all-to-all time hidden behind expert compute: 1 - wait / exchange (--ep-overlap).");
  // The connection gate against slow clients (connection_gate.h).
  registry_.counter("moe:http_connections_admitted_total", "Connections accepted and admitted to the connection gate.");
  registry_.counter("moe:http_connections_refused_total",
                    "Connections refused at accept (429, closed): per_client_cap = over --max-connections-per-client.",
                    {{"reason", "per_client_cap"}});
  registry_.counter("moe:http_connections_closed_total",
                    "Connections closed by the gate: header_timeout = no whole request head within --header-timeout; "
                    "keep_alive_idle = kept alive and idle past the keep-alive timeout.",
                    {{"reason", "header_timeout"}});
  registry_.counter("moe:http_connections_closed_total", "", {{"reason", "keep_alive_idle"}});
  registry_.gauge("moe:http_connections_waiting", "Connections waiting in the gate for a whole request head now.");
}

void ServerMetrics::set_connection_gate(const ConnectionGate::Counters& gate) {
  registry_.counter("moe:http_connections_admitted_total", "").set(static_cast<double>(gate.admitted));
  registry_.counter("moe:http_connections_refused_total", "", {{"reason", "per_client_cap"}})
      .set(static_cast<double>(gate.refused_per_client));
  registry_.counter("moe:http_connections_closed_total", "", {{"reason", "header_timeout"}})
      .set(static_cast<double>(gate.head_timeouts));
  registry_.counter("moe:http_connections_closed_total", "", {{"reason", "keep_alive_idle"}})
      .set(static_cast<double>(gate.idle_closed));
  registry_.gauge("moe:http_connections_waiting", "").set(static_cast<double>(gate.waiting));
}

void ServerMetrics::count_http(const std::string& endpoint, int status) {
  registry_.counter("moe:http_requests_total", "", {{"endpoint", endpoint}, {"status", std::to_string(status)}}).inc();
}

void ServerMetrics::count_finished(const std::string& finish_reason) {
  registry_.counter("moe:request_success_total", "", {{"finished_reason", finish_reason}}).inc();
  if (vllm_) {
    Labels l = model_;
    l.emplace_back("finished_reason", finish_reason);
    registry_.counter("vllm:request_success_total", "", l).inc();
  }
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
  registry_.counter("moe:num_preemptions_total", "").set(static_cast<double>(s.preemptions));
  registry_.counter("moe:prefix_cache_queries_total", "").set(static_cast<double>(s.prefix_cache_queries));
  registry_.counter("moe:prefix_cache_hits_total", "").set(static_cast<double>(s.prefix_cache_hits));
  registry_.counter("moe:kv_disk_hits_total", "").set(static_cast<double>(s.kv_disk_hits));
  registry_.counter("moe:kv_disk_hit_bytes_total", "").set(static_cast<double>(s.kv_disk_hit_bytes));
  registry_.counter("moe:kv_disk_writes_total", "").set(static_cast<double>(s.kv_disk_writes));
  registry_.counter("moe:kv_disk_write_bytes_total", "").set(static_cast<double>(s.kv_disk_write_bytes));
  registry_.counter("moe:kv_disk_rejects_total", "").set(static_cast<double>(s.kv_disk_rejects));
  registry_.counter("moe:kv_disk_write_failures_total", "").set(static_cast<double>(s.kv_disk_write_failures));
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
  registry_.counter("moe:adaptive_k_tokens_total", "").set(static_cast<double>(s.adaptive_k_tokens));
  registry_.counter("moe:adaptive_k_shed_total", "").set(static_cast<double>(s.adaptive_k_shed));
  registry_.counter("moe:requeued_assignments_total", "").set(static_cast<double>(s.requeued));
  registry_.counter("moe:ep_comm_wait_seconds_total", "").set(s.ep_comm_wait_seconds);
  registry_.counter("moe:ep_exchange_seconds_total", "").set(s.ep_exchange_seconds);
  registry_.gauge("moe:comm_overlap_ratio", "").set(s.comm_overlap_ratio);
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
  // Per-link all-to-all bytes (rank 0's links: sent 0 -> d, received s -> 0).
  auto link = [&](size_t src, size_t dst, int64_t bytes) {
    registry_
        .counter("moe:ep_link_bytes_total",
                 "Bytes of expert-parallel all-to-all rows (dispatch + combine) from rank src to rank dst; rank 0's "
                 "links (src = dst = 0: rows it kept).",
                 {{"src", std::to_string(src)}, {"dst", std::to_string(dst)}})
        .set(static_cast<double>(bytes));
  };
  for (size_t d = 0; d < s.link_bytes_sent.size(); ++d) link(0, d, s.link_bytes_sent[d]);
  for (size_t r = 1; r < s.link_bytes_received.size(); ++r) link(r, 0, s.link_bytes_received[r]);
  render_vllm(s);
  return registry_.render();
}

}  // namespace moe::serve
