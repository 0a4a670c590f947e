// moe bench serve: a serving benchmark client for OpenAI-compatible servers (`moe
// serve`, vLLM, ...), modelled on vLLM's benchmarks/benchmark_serving.py: requests from
// a dataset (ShareGPT JSON or an Azure/Splitwise trace CSV), sent streaming at a
// Poisson/gamma rate or at the trace's arrival times, at most --max-concurrency in
// flight; prints vLLM's result table (TTFT, TPOT, ITL, E2EL, throughput, goodput).
// --workload multi-turn (conversations whose turns resend the whole conversation) and
// --workload shared-prefix (one system prompt before every question) add per-turn TTFT
// and the server's prefix-cache hit rate (usage.prompt_tokens_details.cached_tokens).
// The pieces live in src/moe/serve_bench/ (the definitions are in serving_metrics.h,
// workload.h and reuse_metrics.h).
//
//   moe bench serve --base-url http://127.0.0.1:8000
//       --dataset ../shared/data/prompts/sharegpt_v3_filtered_500.json
//       --num-prompts 100 --request-rate 4 --max-concurrency 16 --result-json r.json
//   moe bench serve --base-url http://127.0.0.1:8000 --workload multi-turn
//       --num-conversations 8 --turns 4 --think-time 0.5 --default-output-len 32
#include <unistd.h>

#include <algorithm>
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
#include "moe/serve_bench/conversation_runner.h"
#include "moe/serve_bench/dataset.h"
#include "moe/serve_bench/reuse_metrics.h"
#include "moe/serve_bench/serving_metrics.h"
#include "moe/serve_bench/schedule.h"
#include "moe/serve_bench/workload.h"

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
  std::string workload = "single";
  int num_conversations = 8;
  int turns = 4;
  double think_time = 0.0;
  int shared_prefix_tokens = 256;
  std::vector<std::string> given;  // the options on the command line, by name
};

// "error: <message>" and exit status 2: a usage error, as CLI11's own.
int usage_error(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 2;
}

bool given(const BenchServeFlags& f, const std::string& name) {
  return std::find(f.given.begin(), f.given.end(), name) != f.given.end();
}

// Flags that only one workload reads are refused with another (accepted and ignored,
// they would make a run look like what it is not); then the values of the workload's own.
std::optional<std::string> check_workload_flags(const BenchServeFlags& f, sb::Workload w) {
  struct Owned {
    const char* flag;
    bool used;
    const char* by;
  };
  const bool multi = w == sb::Workload::kMultiTurn, shared = w == sb::Workload::kSharedPrefix;
  const Owned owned[] = {
      {"--num-conversations", multi, "--workload multi-turn"},
      {"--turns", multi, "--workload multi-turn"},
      {"--think-time", multi, "--workload multi-turn"},
      {"--shared-prefix-tokens", shared, "--workload shared-prefix"},
      {"--num-prompts", !multi, "--workload single and shared-prefix (multi-turn sends --num-conversations x --turns)"},
      {"--trace-time-scale", w == sb::Workload::kSingle, "--workload single (trace replay)"},
      {"--trace-token-scale", w == sb::Workload::kSingle, "--workload single (trace replay)"},
  };
  for (const Owned& o : owned) {
    if (!o.used && given(f, o.flag)) {
      return std::string(o.flag) + " is only read by " + o.by + ", not by --workload " + sb::workload_name(w);
    }
  }
  if (w == sb::Workload::kSingle && f.dataset.empty()) {
    return std::string("--dataset is required with --workload single (ShareGPT JSON or trace CSV)");
  }
  if (w != sb::Workload::kSingle && !f.dataset.empty()) {
    StatusOr<sb::DatasetFormat> fmt = sb::parse_dataset_format(f.dataset_format);
    if (fmt.ok()) fmt = sb::resolve_dataset_format(f.dataset, *fmt);
    if (fmt.ok() && *fmt == sb::DatasetFormat::kTrace) {
      return "--workload " + std::string(sb::workload_name(w)) +
             " takes its messages from a ShareGPT JSON file, not a trace: '" + f.dataset + "'";
    }
  }
  if (multi && f.turns < 1) return "--turns must be >= 1, got " + std::to_string(f.turns);
  if (multi && f.num_conversations < 1) {
    return "--num-conversations must be >= 1, got " + std::to_string(f.num_conversations);
  }
  if (multi && (!(f.think_time >= 0) || !std::isfinite(f.think_time))) {
    return "--think-time must be >= 0 seconds, got " + format_python_float(f.think_time);
  }
  if (multi && static_cast<long long>(f.num_conversations) * f.turns > 1000000) {
    return "--num-conversations x --turns must be <= 1000000";
  }
  if (shared && f.shared_prefix_tokens < 1) {
    return "--shared-prefix-tokens must be >= 1, got " + std::to_string(f.shared_prefix_tokens);
  }
  return std::nullopt;
}

int run_bench_serve(BenchServeFlags f) {
  // Flags first, before touching the dataset or the network.
  StatusOr<sb::Workload> workload = sb::parse_workload(f.workload);
  if (!workload.ok()) return usage_error(workload.status().message());
  if (std::optional<std::string> bad = check_workload_flags(f, *workload)) return usage_error(*bad);
  const bool single = *workload == sb::Workload::kSingle;
  if (*workload == sb::Workload::kSharedPrefix && f.max_model_len != 0 && f.shared_prefix_tokens >= f.max_model_len) {
    return usage_error("--shared-prefix-tokens " + std::to_string(f.shared_prefix_tokens) +
                       " leaves no room for a question and its answer in --max-model-len " +
                       std::to_string(f.max_model_len));
  }
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
  StatusOr<sb::DatasetFormat> resolved = sb::DatasetFormat::kShareGpt;  // no --dataset: synthetic messages
  if (!f.dataset.empty()) {
    resolved = sb::resolve_dataset_format(f.dataset, *format);
    if (!resolved.ok()) return fail(resolved.status().message());
    if (!std::ifstream(f.dataset)) return fail("--dataset: cannot open '" + f.dataset + "': " + std::strerror(errno));
  }
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

  // What to send: the dataset's rows (single), conversations of user messages
  // (multi-turn) or questions after the shared prefix (shared-prefix); the messages and
  // questions are the dataset's first human turns, else synthetic.
  const bool multi = *workload == sb::Workload::kMultiTurn, shared = *workload == sb::Workload::kSharedPrefix;
  const int output_len = f.sharegpt_output_len > 0 ? f.sharegpt_output_len : f.default_output_len;
  const std::string output_flag = f.sharegpt_output_len > 0 ? "--sharegpt-output-len" : "--default-output-len";
  const std::string context = "the max model length " + std::to_string(max_model_len) + " (" + max_model_len_from + ")";
  sb::DatasetOptions dopt;
  dopt.num_prompts = multi ? f.num_conversations * f.turns : f.num_prompts;
  dopt.seed = static_cast<uint64_t>(f.seed);
  dopt.max_model_len = max_model_len;
  if (shared) {
    // The questions are sampled to fit what the prefix leaves (4 tokens at least, as
    // ShareGPT prompts, and the answer).
    const int left = max_model_len - f.shared_prefix_tokens;
    if (left < 8 || output_len + 4 > left) {
      return usage_error("--shared-prefix-tokens " + std::to_string(f.shared_prefix_tokens) +
                         " + a question + an answer of " + std::to_string(output_len) + " tokens (" + output_flag +
                         ") do not fit " + context);
    }
    dopt.max_model_len = left;
  }
  if (f.sharegpt_output_len > 0) dopt.fixed_output_len = f.sharegpt_output_len;
  // multi-turn, shared-prefix: the output length checked here (the default is unused
  // beside a fixed one and must not be refused for a context it need not fit).
  dopt.default_output_len = single ? f.default_output_len : output_len;
  dopt.trace_time_scale = f.trace_time_scale;
  dopt.trace_token_scale = f.trace_token_scale;
  dopt.count_tokens = count_tokens;
  std::vector<sb::SampleRequest> requests;  // multi-turn: the user messages, dealt out below
  bool has_arrivals = false;
  if (!f.dataset.empty()) {
    StatusOr<sb::Dataset> ds = sb::load_dataset(f.dataset, *resolved, dopt);
    if (!ds.ok()) return fail(ds.status().message());
    std::printf("%s\n", ds->summary.c_str());
    requests = std::move(ds->requests);
    has_arrivals = ds->has_arrivals;
  } else {
    // Without --tokenizer the words count one token each (the shipped tokenizer's). The
    // seed picks the messages: a new one sends text a warm server has not cached.
    requests = sb::synthetic_messages(dopt.num_prompts, output_len,
                                      f.tokenizer.empty() ? sb::TokenCounter() : count_tokens,
                                      static_cast<uint64_t>(f.seed) * static_cast<uint64_t>(dopt.num_prompts));
    std::printf("Synthetic %s: %d of %d words, output length %d\n", multi ? "user messages" : "questions",
                dopt.num_prompts, sb::kSyntheticMessageWords, output_len);
    if (multi && requests.front().prompt_len + output_len > max_model_len) {
      return usage_error("a first turn of " + std::to_string(requests.front().prompt_len) + " tokens + " +
                         output_flag + " " + std::to_string(output_len) + " do not fit " + context);
    }
  }
  std::printf("Max model length: %d (%s)\n", max_model_len, max_model_len_from);
  std::vector<sb::Conversation> conversations;
  if (multi) {
    conversations = sb::deal_conversations(requests, f.num_conversations, f.turns);
    std::printf("Workload: multi-turn, %d conversations x %d turns, think time %s s\n", f.num_conversations, f.turns,
                format_python_float(f.think_time).c_str());
  } else if (shared) {
    // Its tokens: exact with --tokenizer; else the synthetic words are one token each.
    const std::string prefix =
        sb::shared_prefix_text(f.shared_prefix_tokens, f.tokenizer.empty() ? sb::TokenCounter() : count_tokens);
    const int prefix_tokens = f.tokenizer.empty() ? f.shared_prefix_tokens : count_tokens(prefix);
    std::vector<sb::SampleRequest> built = sb::shared_prefix_requests(prefix, prefix_tokens, requests, count_tokens);
    requests.clear();
    for (sb::SampleRequest& r : built) {
      if (r.prompt_len + r.output_len <= max_model_len) requests.push_back(std::move(r));
    }
    if (requests.empty()) {
      return usage_error("--shared-prefix-tokens " + std::to_string(f.shared_prefix_tokens) + " + a question + " +
                         output_flag + " " + std::to_string(output_len) + " do not fit " + context);
    }
    std::printf("Workload: shared-prefix, a system prompt of %d tokens before each of %zu questions", f.shared_prefix_tokens,
                requests.size());
    if (requests.size() < built.size()) std::printf(" (%zu longer than the context dropped)", built.size() - requests.size());
    std::printf("\n");
  }

  std::vector<double> arrivals;
  const bool replay = has_arrivals && !f.request_rate_given;
  if (replay) {
    for (const sb::SampleRequest& r : requests) arrivals.push_back(r.arrival_s);
  } else {
    const int n = multi ? f.num_conversations : static_cast<int>(requests.size());
    StatusOr<std::vector<double>> a = sb::request_arrivals(n, *rate, f.burstiness, static_cast<uint64_t>(f.seed));
    if (!a.ok()) return fail(a.status().message());
    arrivals = std::move(a).value();
  }

  std::printf("Model: %s at %s%s%s\n", copt.model.c_str(), copt.base.origin.c_str(), copt.base.prefix.c_str(),
              copt.endpoint.c_str());
  if (replay) {
    std::printf("Traffic: trace arrival times (time scale %s)\n", format_python_float(f.trace_time_scale).c_str());
  } else {
    std::printf("%s: %s\n", multi ? "Conversation start rate" : "Traffic request rate",
                std::isinf(*rate) ? "inf" : format_python_float(*rate).c_str());
    std::printf("Burstiness factor: %s (%s)\n", format_python_float(f.burstiness).c_str(),
                f.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
  }
  std::printf("%s: %s\n", multi ? "Maximum concurrent conversations" : "Maximum request concurrency",
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
  sb::RunResult run;
  sb::ConversationRunResult conv;
  std::vector<bool> later;  // turns 2+ (multi-turn), requests 2+ (shared-prefix)
  if (multi) {
    sb::ConversationRunOptions ro;
    ro.max_concurrency = f.max_concurrency;
    ro.think_time_s = f.think_time;
    ro.max_model_len = max_model_len;
    ro.count_tokens = count_tokens;
    ro.progress = progress;
    conv = sb::run_conversations(copt, conversations, arrivals, ro);
    run.outputs = std::move(conv.outputs);
    run.duration_s = conv.duration_s;
    for (int t : conv.turn_of) later.push_back(t > 1);
  } else {
    run = sb::run_benchmark(copt, requests, arrivals, f.max_concurrency, progress, 1.0);
    for (size_t i = 0; i < run.outputs.size(); ++i) later.push_back(shared && i > 0);
  }
  if (run.outputs.empty()) {
    return fail("no request was sent: every conversation's first turn + its max_tokens exceeds " + context);
  }

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
  sb::ReuseReport reuse;
  reuse.workload = *workload;
  reuse.num_conversations = f.num_conversations;
  reuse.turns = f.turns;
  reuse.think_time_s = f.think_time;
  reuse.conversations_stopped_early = conv.stopped_early;
  reuse.conversations_ended_by_failure = conv.ended_by_failure;
  reuse.shared_prefix_tokens = f.shared_prefix_tokens;
  reuse.reuse = sb::prefix_reuse(run.outputs, later);
  reuse.ttft = sb::turn_ttft(run.outputs, later);
  if (!single) {
    std::fputs(sb::format_reuse_report(reuse).c_str(), stdout);
    std::fflush(stdout);
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
    j["dataset"] = f.dataset.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.dataset);
    j["num_prompts"] = single ? f.num_prompts : static_cast<int>(run.outputs.size());
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
    if (multi) {  // per request sent; the arrivals are the conversations'
      for (size_t i = 0; i < run.outputs.size(); ++i) {
        const sb::Conversation& c = conversations[static_cast<size_t>(conv.conversation_of[i])];
        requested_output.push_back(c.turns[static_cast<size_t>(conv.turn_of[i] - 1)].output_len);
      }
      arrivals_json = arrivals;
    } else {
      for (size_t i = 0; i < requests.size(); ++i) {
        requested_output.push_back(requests[i].output_len);
        arrivals_json.push_back(arrivals[i]);
      }
    }
    j["requested_output_lens"] = std::move(requested_output);
    j["scheduled_arrivals"] = std::move(arrivals_json);
    j.update(sb::metrics_json(m, run.outputs, ropt));
    j.update(sb::reuse_json(reuse));
    if (!single) {
      nlohmann::json cached = nlohmann::json::array();
      for (const sb::RequestOutput& o : run.outputs) cached.push_back(o.cached_tokens >= 0 ? o.cached_tokens : 0);
      j["cached_tokens_per_request"] = std::move(cached);
    }
    if (multi) {
      j["conversation_ids"] = conv.conversation_of;
      j["turn_ids"] = conv.turn_of;
    }
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
  cmd.add_option("--dataset", f->dataset,
                 "ShareGPT JSON or trace CSV (arrived_at,num_prefill_tokens,num_decode_tokens); required by "
                 "--workload single, else the user messages (default: synthetic)");
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
  cmd.add_option("--workload", f->workload,
                 "single (one request per dataset row), multi-turn (conversations resending their history) or "
                 "shared-prefix (one system prompt before every question)")
      ->capture_default_str();
  cmd.add_option("--num-conversations", f->num_conversations, "multi-turn: conversations to run")
      ->capture_default_str();
  cmd.add_option("--turns", f->turns, "multi-turn: turns per conversation")->capture_default_str();
  cmd.add_option("--think-time", f->think_time, "multi-turn: seconds between an answer and the next turn")
      ->capture_default_str();
  cmd.add_option("--shared-prefix-tokens", f->shared_prefix_tokens,
                 "shared-prefix: tokens of the system prompt shared by every request (BOS included)")
      ->capture_default_str();
  return [f, rate, &cmd] {
    BenchServeFlags flags = *f;
    flags.request_rate_given = rate->count() > 0;
    for (const CLI::Option* o : cmd.get_options()) {
      if (o->count() > 0) flags.given.push_back(o->get_name());
    }
    return run_bench_serve(flags);
  };
}

}  // namespace moe::cli
