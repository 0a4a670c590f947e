// moe bench serve: a serving benchmark client for OpenAI-compatible servers (`moe
// serve`, vLLM, ...), modelled on vLLM's benchmarks/benchmark_serving.py: requests from
// a dataset (ShareGPT JSON or an Azure/Splitwise trace CSV), sent streaming at a
// Poisson/gamma rate or at the trace's arrival times, at most --max-concurrency in
// flight; prints vLLM's result table (TTFT, TPOT, ITL, E2EL, throughput, goodput).
// The pieces live in src/moe/serve_bench/ (the definitions are in metrics.h).
//
//   moe bench serve --base-url http://127.0.0.1:8000
//       --dataset ../shared/data/prompts/sharegpt_v3_filtered_500.json
//       --num-prompts 100 --request-rate 4 --max-concurrency 16 --result-json r.json
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/core/atomic_file.h"
#include "moe/core/text_format.h"
#include "moe/model/tokenizer.h"
#include "moe/serve_bench/client.h"
#include "moe/serve_bench/dataset.h"
#include "moe/serve_bench/serving_metrics.h"
#include "moe/serve_bench/schedule.h"

namespace moe::cli {
namespace {

namespace sb = moe::serve_bench;

struct BenchServeFlags {
  std::string base_url;
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string dataset;
  std::string dataset_format = "auto";
  int num_prompts = 1000;
  std::string request_rate = "inf";
  bool request_rate_given = false;
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: none
  int64_t seed = 0;
  std::string api_key;
  std::vector<std::string> goodput;
  std::string percentiles = "50,90,99";
  std::string percentile_metrics = "ttft,tpot,itl,e2el";
  int max_model_len = 0;  // 0: the server's (/v1/models "max_model_len"), else 512
  int sharegpt_output_len = 0;  // 0: from the data
  int default_output_len = 128;
  std::string tokenizer;
  double bytes_per_token = sb::kDefaultBytesPerToken;
  double trace_time_scale = 1.0;
  double trace_token_scale = 1.0;
  std::string result_json;
  bool ignore_eos = false;
  double temperature = 0.0;
  double connect_timeout = 5.0;
  double request_timeout = 3600.0;
  bool disable_progress = false;
};

int run_bench_serve(BenchServeFlags f) {
  // Flags first, before touching the dataset or the network.
  StatusOr<sb::BaseUrl> base = sb::parse_base_url(f.base_url);
  if (!base.ok()) return fail(base.status().message());
  if (f.endpoint.empty() || f.endpoint.front() != '/') return fail("--endpoint must start with '/', got '" + f.endpoint + "'");
  if (f.endpoint.size() < 11 || f.endpoint.compare(f.endpoint.size() - 11, 11, "completions") != 0) {
    return fail("--endpoint: '" + f.endpoint + "' is not an OpenAI completions endpoint (/v1/completions or /v1/chat/completions)");
  }
  if (f.num_prompts <= 0) return fail("--num-prompts must be >= 1, got " + std::to_string(f.num_prompts));
  StatusOr<double> rate = sb::parse_request_rate(f.request_rate);
  if (!rate.ok()) return fail(rate.status().message());
  if (!(f.burstiness > 0) || !std::isfinite(f.burstiness)) return fail("--burstiness must be > 0, got " + format_python_float(f.burstiness));
  if (f.max_concurrency < 0) return fail("--max-concurrency must be >= 1, got " + std::to_string(f.max_concurrency));
  StatusOr<sb::GoodputSlo> slo = sb::parse_goodput(f.goodput);
  if (!slo.ok()) return fail(slo.status().message());
  StatusOr<std::vector<double>> percentiles = sb::parse_percentiles(f.percentiles);
  if (!percentiles.ok()) return fail(percentiles.status().message());
  StatusOr<std::vector<std::string>> metric_names = sb::parse_percentile_metrics(f.percentile_metrics);
  if (!metric_names.ok()) return fail(metric_names.status().message());
  StatusOr<sb::DatasetFormat> format = sb::parse_dataset_format(f.dataset_format);
  if (!format.ok()) return fail(format.status().message());
  if (f.max_model_len != 0 && f.max_model_len < 8) {
    return fail("--max-model-len must be >= 8, got " + std::to_string(f.max_model_len));
  }
  StatusOr<sb::DatasetFormat> resolved = sb::resolve_dataset_format(f.dataset, *format);
  if (!resolved.ok()) return fail(resolved.status().message());
  if (!std::ifstream(f.dataset)) return fail("--dataset: cannot open '" + f.dataset + "': " + std::strerror(errno));
  if (!(f.bytes_per_token > 0) || !std::isfinite(f.bytes_per_token)) return fail("--bytes-per-token must be > 0");
  if (!(f.temperature >= 0) || !std::isfinite(f.temperature)) return fail("--temperature must be >= 0");
  if (!(f.connect_timeout > 0) || !(f.request_timeout > 0)) return fail("--connect-timeout and --request-timeout must be > 0");

  if (f.sharegpt_output_len < 0) return fail("--sharegpt-output-len must be >= 1");
  if (f.default_output_len < 1) return fail("--default-output-len must be >= 1");
  if (!(f.trace_time_scale > 0) || !std::isfinite(f.trace_time_scale)) return fail("--trace-time-scale must be > 0");
  if (!(f.trace_token_scale > 0) || !std::isfinite(f.trace_token_scale)) return fail("--trace-token-scale must be > 0");

  // Token counting: the server's own tokenizer when given (exact, as vLLM's
  // --tokenizer), else the byte-length estimate.
  sb::TokenCounter count_tokens;
  std::shared_ptr<Tokenizer> tokenizer;
  if (!f.tokenizer.empty()) {
    StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::load(f.tokenizer);
    if (!tok.ok()) return fail("--tokenizer: " + tok.status().message());
    tokenizer = std::move(tok).value();
    count_tokens = [tokenizer](std::string_view t) { return static_cast<int>(tokenizer->encode(std::string(t)).size()); };
  } else {
    const double bpt = f.bytes_per_token;
    count_tokens = [bpt](std::string_view t) { return sb::estimate_tokens(t, bpt); };
  }

  sb::ClientOptions copt;
  copt.base = *base;
  copt.endpoint = f.endpoint;
  copt.model = f.model;
  copt.api_key = f.api_key;
  if (copt.api_key.empty()) {
    if (const char* env = std::getenv("OPENAI_API_KEY")) copt.api_key = env;
  }
  copt.ignore_eos = f.ignore_eos;
  copt.temperature = f.temperature;
  copt.connect_timeout_s = f.connect_timeout;
  copt.read_timeout_s = f.request_timeout;

  // Reachability (and the default model) before the run: an unreachable server is an
  // error after the connect timeout, not a benchmark of failures.
  StatusOr<std::vector<sb::ServedModel>> models = sb::list_models(copt);
  if (!models.ok()) {
    if (models.status().code() == StatusCode::kUnavailable || f.model.empty()) return fail(models.status().message());
    std::fprintf(stderr, "warning: %s; using --model %s\n", models.status().message().c_str(), f.model.c_str());
  }
  if (copt.model.empty()) copt.model = models->front().id;
  // The context to fit requests into: the flag, else what the server reports (vLLM's
  // /v1/models has max_model_len), else 512 (the shipped model's).
  int max_model_len = f.max_model_len;
  const char* max_model_len_from = "--max-model-len";
  if (max_model_len == 0 && models.ok()) {
    for (const sb::ServedModel& sm : *models) {
      if (sm.id == copt.model && sm.max_model_len > 0) {
        max_model_len = sm.max_model_len;
        max_model_len_from = "the server";
      }
    }
  }
  if (max_model_len == 0) {
    max_model_len = 512;
    max_model_len_from = "default";
  }

  sb::DatasetOptions dopt;
  dopt.num_prompts = f.num_prompts;
  dopt.seed = static_cast<uint64_t>(f.seed);
  dopt.max_model_len = max_model_len;
  if (f.sharegpt_output_len > 0) dopt.fixed_output_len = f.sharegpt_output_len;
  dopt.default_output_len = f.default_output_len;
  dopt.trace_time_scale = f.trace_time_scale;
  dopt.trace_token_scale = f.trace_token_scale;
  dopt.count_tokens = count_tokens;
  StatusOr<sb::Dataset> ds = sb::load_dataset(f.dataset, *resolved, dopt);
  if (!ds.ok()) return fail(ds.status().message());
  std::printf("%s\n", ds->summary.c_str());
  std::printf("Max model length: %d (%s)\n", max_model_len, max_model_len_from);

  std::vector<double> arrivals;
  const bool replay = ds->has_arrivals && !f.request_rate_given;
  if (replay) {
    for (const sb::SampleRequest& r : ds->requests) arrivals.push_back(r.arrival_s);
  } else {
    StatusOr<std::vector<double>> a =
        sb::request_arrivals(static_cast<int>(ds->requests.size()), *rate, f.burstiness, static_cast<uint64_t>(f.seed));
    if (!a.ok()) return fail(a.status().message());
    arrivals = std::move(a).value();
  }

  std::printf("Model: %s at %s%s%s\n", copt.model.c_str(), copt.base.origin.c_str(), copt.base.prefix.c_str(),
              copt.endpoint.c_str());
  if (replay) {
    std::printf("Traffic: trace arrival times (time scale %s)\n", format_python_float(f.trace_time_scale).c_str());
  } else {
    std::printf("Traffic request rate: %s\n", std::isinf(*rate) ? "inf" : format_python_float(*rate).c_str());
    std::printf("Burstiness factor: %s (%s)\n", format_python_float(f.burstiness).c_str(),
                f.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
  }
  std::printf("Maximum request concurrency: %s\n",
              f.max_concurrency > 0 ? std::to_string(f.max_concurrency).c_str() : "None");
  std::fflush(stdout);

  sb::ProgressFn progress;
  if (!f.disable_progress) {
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    progress = [tty](int done, int failed, int total, double elapsed) {
      std::fprintf(stderr, "%s%d/%d requests done (%d failed), %.1f s%s", tty ? "\r" : "", done, total, failed,
                   elapsed, tty ? "" : "\n");
      if (tty && done == total) std::fputc('\n', stderr);
      std::fflush(stderr);
    };
  }
  sb::RunResult run = sb::run_benchmark(copt, ds->requests, arrivals, f.max_concurrency, progress, 1.0);

  sb::BenchmarkMetrics m = sb::calculate_metrics(run.outputs, run.duration_s, *percentiles, *slo);
  sb::ReportOptions ropt;
  if (f.max_concurrency > 0) ropt.max_concurrency = f.max_concurrency;
  ropt.goodput = slo->any();
  ropt.percentile_metrics = *metric_names;
  std::fputs(sb::format_report(m, ropt).c_str(), stdout);
  std::fflush(stdout);
  if (m.failed > 0) {
    std::fprintf(stderr, "%d of %zu requests failed; the first (request %d): %s\n", m.failed, run.outputs.size(),
                 m.first_error_index, m.first_error.c_str());
    int too_long = 0;
    for (const sb::RequestOutput& o : run.outputs) {
      if (!o.success && o.error.find("context length") != std::string::npos) ++too_long;
    }
    if (too_long > 0 && f.tokenizer.empty()) {
      std::fprintf(stderr,
                   "note: %d requests did not fit the server's context: the byte estimate of their prompt length "
                   "was short; --tokenizer MODEL_DIR counts tokens exactly\n",
                   too_long);
    }
  }

  if (!f.result_json.empty()) {
    nlohmann::json j;
    char date[32];
    std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", std::localtime(&now));
    j["date"] = date;
    j["backend"] = "openai-chat";
    if (!sb::is_chat_endpoint(f.endpoint)) j["backend"] = "openai";
    j["base_url"] = f.base_url;
    j["endpoint"] = f.endpoint;
    j["model_id"] = copt.model;
    j["tokenizer_id"] = f.tokenizer.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.tokenizer);
    j["dataset"] = f.dataset;
    j["num_prompts"] = f.num_prompts;
    j["request_rate"] = replay ? nlohmann::json("trace") : std::isinf(*rate) ? nlohmann::json("inf") : nlohmann::json(*rate);
    j["burstiness"] = f.burstiness;
    j["max_concurrency"] = f.max_concurrency > 0 ? nlohmann::json(f.max_concurrency) : nlohmann::json(nullptr);
    j["max_model_len"] = max_model_len;
    j["seed"] = f.seed;
    j["ignore_eos"] = f.ignore_eos;
    j["percentiles"] = *percentiles;
    nlohmann::json goodput = nlohmann::json::object();
    if (slo->ttft_ms) goodput["ttft"] = *slo->ttft_ms;
    if (slo->tpot_ms) goodput["tpot"] = *slo->tpot_ms;
    if (slo->e2el_ms) goodput["e2el"] = *slo->e2el_ms;
    j["goodput_slo_ms"] = goodput;
    nlohmann::json requested_output = nlohmann::json::array(), arrivals_json = nlohmann::json::array();
    for (size_t i = 0; i < ds->requests.size(); ++i) {
      requested_output.push_back(ds->requests[i].output_len);
      arrivals_json.push_back(arrivals[i]);
    }
    j["requested_output_lens"] = std::move(requested_output);
    j["scheduled_arrivals"] = std::move(arrivals_json);
    j.update(sb::metrics_json(m, run.outputs, ropt));
    Status st = write_file_atomically(f.result_json, j.dump(2) + "\n");
    if (!st.ok()) return fail("--result-json: cannot write '" + f.result_json + "': " + st.message());
  }
  if (m.completed == 0) return fail("all " + std::to_string(run.outputs.size()) + " requests failed; the first: " + m.first_error);
  return 0;
}

}  // namespace

RunFn add_bench_serve_command(CLI::App& cmd) {
  auto f = std::make_shared<BenchServeFlags>();
  cmd.add_option("--base-url", f->base_url, "Server base URL, e.g. http://127.0.0.1:8000")->required();
  cmd.add_option("--endpoint", f->endpoint, "/v1/completions or /v1/chat/completions")->capture_default_str();
  cmd.add_option("--model", f->model, "Model name to send (default: the first of GET /v1/models)");
  cmd.add_option("--dataset", f->dataset, "ShareGPT JSON or trace CSV (arrived_at,num_prefill_tokens,num_decode_tokens)")
      ->required();
  cmd.add_option("--dataset-format", f->dataset_format, "auto (by extension), sharegpt or trace")
      ->check(CLI::IsMember({"auto", "sharegpt", "trace"}))
      ->capture_default_str();
  cmd.add_option("--num-prompts", f->num_prompts, "Requests to send")->capture_default_str();
  auto* rate = cmd.add_option("--request-rate", f->request_rate,
                              "Requests/s (Poisson arrivals; inf: all at once). Default for a trace: its arrival times")
                   ->capture_default_str();
  cmd.add_option("--burstiness", f->burstiness, "Gamma shape of the gaps: 1 Poisson, < 1 burstier, > 1 more even")
      ->capture_default_str();
  cmd.add_option("--max-concurrency", f->max_concurrency, "Most requests in flight (default: no limit)");
  cmd.add_option("--seed", f->seed, "Seed for the dataset sample and the arrivals")->capture_default_str();
  cmd.add_option("--api-key", f->api_key, "Bearer token (default: $OPENAI_API_KEY)");
  cmd.add_option("--goodput", f->goodput, "SLOs in ms for goodput, e.g. --goodput ttft:500 tpot:50 e2el:5000");
  cmd.add_option("--percentiles", f->percentiles, "Comma-separated percentiles to report")->capture_default_str();
  cmd.add_option("--percentile-metrics", f->percentile_metrics, "Metrics to report: ttft,tpot,itl,e2el")
      ->capture_default_str();
  cmd.add_option("--max-model-len", f->max_model_len,
                 "Context of the served model: ShareGPT pairs longer are dropped, trace lengths clamped "
                 "(default: the server's /v1/models max_model_len, else 512)");
  cmd.add_option("--sharegpt-output-len", f->sharegpt_output_len, "Fixed max_tokens for ShareGPT requests");
  cmd.add_option("--default-output-len", f->default_output_len,
                 "max_tokens for ShareGPT conversations without a gpt turn")
      ->capture_default_str();
  cmd.add_option("--tokenizer", f->tokenizer,
                 "Model directory whose tokenizer counts prompt tokens exactly (default: estimate from bytes)");
  cmd.add_option("--bytes-per-token", f->bytes_per_token, "Estimate: bytes per token (+1 for BOS)")
      ->capture_default_str();
  cmd.add_option("--trace-time-scale", f->trace_time_scale, "Trace replay speed-up (arrival / scale)")
      ->capture_default_str();
  cmd.add_option("--trace-token-scale", f->trace_token_scale, "Trace token counts multiplied by this before clamping")
      ->capture_default_str();
  cmd.add_option("--result-json", f->result_json, "Write all figures and per-request arrays here");
  cmd.add_flag("--ignore-eos", f->ignore_eos, "Send ignore_eos: true (generate exactly max_tokens)");
  cmd.add_option("--temperature", f->temperature, "Sampling temperature")->capture_default_str();
  cmd.add_option("--connect-timeout", f->connect_timeout, "Seconds to wait for a connection")->capture_default_str();
  cmd.add_option("--request-timeout", f->request_timeout, "Seconds of silence before a request fails")
      ->capture_default_str();
  cmd.add_flag("--disable-progress", f->disable_progress, "No progress lines on stderr");
  return [f, rate] {
    BenchServeFlags flags = *f;
    flags.request_rate_given = rate->count() > 0;
    return run_bench_serve(flags);
  };
}

}  // namespace moe::cli
