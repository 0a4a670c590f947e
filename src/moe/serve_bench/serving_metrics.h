// The figures of vLLM's benchmarks/benchmark_serving.py (calculate_metrics), from the
// per-request records:
//   completed        requests that succeeded; failed = the others
//   total input      sum of prompt tokens of completed requests (server usage, else
//                    the client's estimate)
//   total output     sum of output tokens of completed requests (usage.completion_tokens,
//                    else the number of text chunks: one token per chunk assumed)
//   throughputs      completed / duration, output / duration, (input + output) / duration
//   TTFT             send -> first non-empty text chunk
//   TPOT             (E2EL - TTFT) / (output tokens - 1), requests with > 1 output token
//   ITL              every gap between consecutive text chunks, pooled over requests
//   E2EL             send -> end of stream
//   goodput          completed requests meeting every given SLO (value <= SLO; TPOT
//                    counts as 0 for <= 1 output token) / duration
// Each latency metric: mean, median, population std (numpy's np.std) and percentiles
// by linear interpolation (np.percentile's default); an empty metric reads 0, as
// numpy does on vLLM's `x or 0`.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe/serve_bench/request_output.h"
#include "moe/status.h"

namespace moe::serve_bench {

// np.percentile(values, p) with linear interpolation; p in [0, 100]. 0 if empty.
double percentile(std::vector<double> values, double p);
double mean(const std::vector<double>& values);
double stddev(const std::vector<double>& values);  // population (ddof = 0)

struct MetricStats {  // milliseconds
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value)
  int count = 0;  // samples
};
MetricStats summarize_seconds(const std::vector<double>& seconds, const std::vector<double>& percentiles);

struct GoodputSlo {  // milliseconds
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};
// "ttft:500", "tpot:50", "e2el:3000" (vLLM's --goodput KEY:VALUE, milliseconds).
StatusOr<GoodputSlo> parse_goodput(const std::vector<std::string>& pairs);
// "50,90,99" -> {50, 90, 99}; each in [0, 100].
StatusOr<std::vector<double>> parse_percentiles(const std::string& list);
// "ttft,tpot,itl,e2el" (any subset, in any order).
StatusOr<std::vector<std::string>> parse_percentile_metrics(const std::string& list);

struct BenchmarkMetrics {
  int completed = 0;
  int failed = 0;
  long long total_input = 0;
  long long total_output = 0;
  double duration_s = 0;
  double request_throughput = 0;
  double request_goodput = 0;
  double output_throughput = 0;
  double total_token_throughput = 0;
  MetricStats ttft, tpot, itl, e2el;
  std::vector<int> output_lens;  // per request; 0 for failed ones
  std::vector<double> tpots_s;   // per request; 0 for failed ones and <= 1 output token
  std::string first_error;       // of the first failed request (in request order)
  int first_error_index = -1;
};

BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                   const std::vector<double>& percentiles, const GoodputSlo& goodput);

struct ReportOptions {
  std::optional<int> max_concurrency;
  bool goodput = false;
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
};
// vLLM's result table ("============ Serving Benchmark Result ============" ...).
std::string format_report(const BenchmarkMetrics& m, const ReportOptions& options);
// Pieces of that table for other sections: one "label value" line (label padded to 40,
// value to 10, then "\n") and a title centred in 50 `fill` characters (then "\n").
std::string report_line(const std::string& label, const std::string& value);
std::string report_title(const std::string& title, char fill);

// vLLM's result dict: the aggregate figures (duration, completed, ..., mean_ttft_ms,
// p99_ttft_ms, ...) and the per-request arrays (input_lens, output_lens, ttfts, itls,
// e2els, tpots, start_times, generated_texts, errors).
nlohmann::json metrics_json(const BenchmarkMetrics& m, const std::vector<RequestOutput>& outputs,
                            const ReportOptions& options);

}  // namespace moe::serve_bench
