// The HTTP side of `moe bench serve`: one streaming request to an OpenAI-compatible
// server (as vLLM's async_request_openai_completions / _chat_completions), the model
// list, and the benchmark run (requests sent at their arrival times, at most
// `max_concurrency` in flight, one thread per in-flight request).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe/serve_bench/dataset.h"
#include "moe/serve_bench/request_output.h"
#include "moe/status.h"

namespace moe::serve_bench {

// "http://host:port/prefix" -> origin "http://host:port", prefix "/prefix" (no
// trailing slash; may be empty). InvalidArgument unless http:// or https://.
struct BaseUrl {
  std::string origin;
  std::string prefix;
};
StatusOr<BaseUrl> parse_base_url(const std::string& url);

struct ClientOptions {
  BaseUrl base;
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions
  std::string model;
  std::string api_key;       // "Authorization: Bearer <key>" when set
  bool ignore_eos = false;   // sends vLLM's extra field "ignore_eos": true
  double temperature = 0.0;
  double connect_timeout_s = 5.0;
  double read_timeout_s = 3600.0;  // the longest silence within a response
};

bool is_chat_endpoint(const std::string& endpoint);  // ends in "chat/completions"

// The JSON body: model, prompt (or messages: request.messages, else [{"role": "user",
// "content": prompt}]),
// max_tokens = output_len, temperature, stream: true, stream_options:
// {include_usage: true}, and ignore_eos when asked.
nlohmann::json request_body(const ClientOptions& options, const SampleRequest& request);

// Sends `request` and records it; start_s is measured from `t0`. Never throws: every
// failure is in the returned record (success = false, error).
RequestOutput send_request(const ClientOptions& options, const SampleRequest& request,
                           std::chrono::steady_clock::time_point t0);

// GET <base>/v1/models: the served models, with vLLM's "max_model_len" when the
// server reports it. Unavailable (naming the URL and the transport error) when the
// server cannot be reached within the connect timeout; FailedPrecondition on an HTTP
// error status, DataLoss on an answer without models.
struct ServedModel {
  std::string id;
  int max_model_len = 0;  // 0: not reported
};
StatusOr<std::vector<ServedModel>> list_models(const ClientOptions& options);

// done / failed so far, of total, seconds since the start.
using ProgressFn = std::function<void(int done, int failed, int total, double elapsed_s)>;

struct RunResult {
  std::vector<RequestOutput> outputs;  // in request order
  double duration_s = 0;               // first send -> last response finished
};

// Sends requests[i] at arrivals[i] seconds (non-decreasing), waiting for a free slot
// when `max_concurrency` (> 0) requests are in flight (the slot wait is not part of
// the request's latency: vLLM's semaphore). `progress` is called about every
// `progress_interval_s` from another thread, and once at the end.
RunResult run_benchmark(const ClientOptions& options, const std::vector<SampleRequest>& requests,
                        const std::vector<double>& arrivals, int max_concurrency, const ProgressFn& progress = {},
                        double progress_interval_s = 1.0);

}  // namespace moe::serve_bench
