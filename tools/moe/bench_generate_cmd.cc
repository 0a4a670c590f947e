// moe bench generate: prefill and decode tokens/s at 1 and 2 threads (min/median over
// repeats), and decode against the memory-bandwidth bound. For multi-head latent
// attention models, --mla-attention takes a list of paths: one engine per path, the
// paths interleaved within each repeat (A, B, A, B, ...), a row per path and the
// per-repeat ratios of each path to the first. --kernels and --weights take lists the
// same way, and --hugepages: one engine per combination, interleaved, with ratios
// to the first.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "config_apply.h"
#include "moe/core/membw.h"
#include "moe/engine.h"
#include "moe/model/config.h"
#include "moe/ops/kernel_isa.h"

namespace moe::cli {
namespace {

struct BenchFlags {
  std::string model;
  std::string config;  // --config FILE.yaml (config_apply.h)
  int prompt_tokens = 256;
  int gen_tokens = 64;
  int repeats = 5;
  std::vector<int> threads = {1, 2};
  std::vector<std::string> mla_paths = {"auto"};
  size_t bw_buffer_mb = 1024;
  bool batch_invariant = false;
  std::string fp8 = "dequant";
  std::string kv_dtype = "f32";  // EngineOptions::kv_dtype
  std::string trace;  // --trace: the first engine's runs
  std::vector<std::string> kernels = {"auto"};
  std::vector<std::string> weights = {"native"};
  std::vector<std::string> hugepages = {"auto"};  // EngineOptions::hugepages, a list as --kernels
  std::vector<std::string> precisions = {"highest"};  // EngineOptions::matmul_precision, a list as --kernels
};

// One engine of the comparison: an MLA path, a kernel path and a weight format. Its
// label joins the dimensions that vary (the MLA path always for MLA models): one word.
struct Variant {
  std::string mla, kernels, weights, hugepages, precision;
  std::string label(bool with_mla, bool with_kernels, bool with_weights, bool with_hugepages,
                    bool with_precision) const {
    std::string s = with_mla ? mla : "";
    if (with_kernels) s += (s.empty() ? "" : "+") + kernels;
    if (with_weights) s += (s.empty() ? "" : "+") + weights;
    if (with_hugepages) s += (s.empty() ? "" : "+") + ("hugepages-" + hugepages);
    if (with_precision) s += (s.empty() ? "" : "+") + ("matmul-" + precision);
    return s;
  }
};

// Which kernel paths this CPU offers (ops/kernel_isa.h), for the report's header.
std::string kernel_summary() {
  std::string s = "cpu kernel paths:";
  for (KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512, KernelIsa::kAvx512Bf16}) {
    if (cpu_supports(isa)) s += std::string(" ") + kernel_isa_name(isa);
  }
  s += std::string(" (auto = ") + kernel_isa_name(best_kernel_isa()) + "); int8: " +
       (cpu_has_avx512_vnni() ? "avx512-vnni" : "avx2 maddubs") + "; amx: " + (cpu_has_amx() ? "present, unused" : "no");
  return s;
}

struct Stats {
  double min = 0, median = 0, max = 0;
};

Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

// Tokens/s of each timed repeat for one (threads, path).
struct Series {
  std::vector<double> prefill, decode;
};

std::string check_mla_paths(const std::vector<std::string>& paths) {
  if (paths.empty()) return "--mla-attention needs at least one of auto, naive, absorbed";
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& p = paths[i];
    if (p != "auto" && p != "naive" && p != "absorbed") {
      return "--mla-attention '" + p + "' is not one of auto, naive, absorbed";
    }
    if (std::find(paths.begin(), paths.begin() + static_cast<std::ptrdiff_t>(i), p) != paths.begin() + i) {
      return "--mla-attention lists '" + p + "' twice";
    }
  }
  return "";
}

// The median of the per-repeat ratios b[r] / a[r] (the two were measured back to back,
// so a slow phase of the shared machine hits both).
double paired_ratio(const std::vector<double>& b, const std::vector<double>& a) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(b[i] / a[i]);
  return stats_of(r).median;
}

int run_bench(const BenchFlags& f) {
  if (f.prompt_tokens < 1) return fail("--prompt-tokens must be >= 1");
  if (f.gen_tokens < 2) return fail("--gen-tokens must be >= 2");
  if (f.repeats < 1) return fail("--repeats must be >= 1");
  for (int t : f.threads) {
    if (t < 1) return fail("--threads values must be >= 1");
  }
  if (std::string e = check_mla_paths(f.mla_paths); !e.empty()) return fail(e);
  const std::string model_dir = f.model.empty() ? default_model_dir() : f.model;
  std::fprintf(stderr, "loading model...\n");
  if (f.fp8 != "native" && f.fp8 != "dequant") return fail("--fp8 must be native or dequant (got '" + f.fp8 + "')");
  auto config = load_model_config(model_dir);
  if (!config.ok()) return fail(config.status().message());
  const bool mla = config.value().mla.enabled();
  if (!mla && f.mla_paths != std::vector<std::string>{"auto"}) {
    return fail("--mla-attention applies to multi-head latent attention models (DeepSeek-V2/V3, Kimi-K2); " +
                model_dir + " has model_type '" + config.value().model_type + "'");
  }
  std::vector<Variant> variants;
  for (const std::string& path : f.mla_paths)
    for (const std::string& k : f.kernels)
      for (const std::string& w : f.weights)
        for (const std::string& h : f.hugepages)
          for (const std::string& p : f.precisions) variants.push_back({path, k, w, h, p});
  std::vector<std::unique_ptr<Engine>> engines;  // one per variant (fixed at open)
  for (const Variant& v : variants) {
    EngineOptions eo{.model_dir = model_dir};
    eo.batch_invariant = f.batch_invariant;
    eo.mla_attention = v.mla;
    eo.kernels = v.kernels;
    eo.weights = v.weights;
    eo.hugepages = v.hugepages;
    eo.matmul_precision = v.precision;
    eo.fp8_mode = f.fp8 == "dequant" ? Fp8Mode::kDequant : Fp8Mode::kNative;
    eo.kv_dtype = f.kv_dtype;
    if (engines.empty()) eo.trace_path = f.trace;  // the first path's runs
    auto engine_or = Engine::open(eo);
    if (!engine_or.ok()) {
      return fail("--kernels " + v.kernels + " --weights " + v.weights + " --hugepages " + v.hugepages +
                  " --matmul-precision " + v.precision + ": " +
                  engine_or.status().message());
    }
    engines.push_back(std::move(engine_or).value());
  }
  const ModelInfo& info = engines.front()->info();
  if (static_cast<int64_t>(f.prompt_tokens) + f.gen_tokens > info.max_context) {  // no int overflow
    return fail("--prompt-tokens + --gen-tokens exceeds the model's context of " + std::to_string(info.max_context));
  }
  std::printf("model: %s (%s), %.1fM parameters, %.1fM active per token, weights %.1f MB\n", info.model_dir.c_str(),
              info.model_type.c_str(), info.num_parameters / 1e6, info.num_active_parameters / 1e6,
              info.weight_bytes / 1e6);
  std::printf("prompt %d tokens, %d generated tokens, %d repeats (+1 warm-up)\n", f.prompt_tokens, f.gen_tokens,
              f.repeats);
  std::printf("%s\n", kernel_summary().c_str());
  const bool multi_k = f.kernels.size() > 1, multi_w = f.weights.size() > 1, multi_h = f.hugepages.size() > 1,
             multi_p = f.precisions.size() > 1;
  const bool labelled = mla || variants.size() > 1;
  std::vector<std::string> labels;
  for (const Variant& v : variants) labels.push_back(v.label(mla, multi_k, multi_w, multi_h, multi_p));
  if (mla) {
    std::string list;
    for (const std::string& p : f.mla_paths) list += (list.empty() ? "" : ", ") + p;
    std::printf("multi-head latent attention: %s (interleaved within each repeat)\n", list.c_str());
  }
  if (multi_k || multi_w || multi_h || multi_p) {
    std::string list;
    for (const std::string& l : labels) list += (list.empty() ? "" : ", ") + l;
    std::printf("variants (%s): %s (interleaved within each repeat)\n",
                (std::string(mla ? "mla path+" : "") + "kernels+weights" + (multi_h ? "+hugepages" : "") + (multi_p ? "+matmul" : "")).c_str(),
                list.c_str());
  }
  const char* column = multi_k || multi_w || multi_h || multi_p ? "variant" : "mla path";
  std::printf("\n");

  // A fixed pseudo-random prompt of ordinary tokens (no BOS/EOS inside).
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> tok(3, info.vocab_size - 1);
  GenerateRequest req;
  req.prompt_token_ids.push_back(1);
  while (static_cast<int>(req.prompt_token_ids.size()) < f.prompt_tokens) req.prompt_token_ids.push_back(tok(rng));
  req.max_tokens = f.gen_tokens;
  req.sampling.temperature = 0;
  req.ignore_eos = true;

  const size_t np = variants.size();
  if (labelled) {
    std::printf("%-8s %-26s %14s %14s %14s %14s\n", "threads", column, "prefill min", "prefill med", "decode min",
                "decode med");
    std::printf("%-8s %-26s %14s %14s %14s %14s\n", "", "", "tok/s", "tok/s", "tok/s", "tok/s");
  } else {
    std::printf("%-8s %14s %14s %14s %14s\n", "threads", "prefill min", "prefill med", "decode min", "decode med");
    std::printf("%-8s %14s %14s %14s %14s\n", "", "tok/s", "tok/s", "tok/s", "tok/s");
  }
  struct DecodeRow {
    int threads;
    std::string path;
    double median;
    size_t bytes_per_token;  // as this variant's engine holds its weights (int8: ~1.1 bytes each)
  };
  std::vector<DecodeRow> decode_median;
  std::vector<std::vector<Series>> all;  // [thread index][path]
  for (int t : f.threads) {
    Engine::set_num_threads(t);
    std::vector<Series> series(np);
    for (int r = 0; r <= f.repeats; ++r) {
      for (size_t p = 0; p < np; ++p) {
        std::fprintf(stderr, "\rthreads %d: run %d/%d", t, r, f.repeats);
        auto res = engines[p]->generate(req);
        if (!res.ok()) return fail(res.status().message());
        if (r == 0) continue;  // warm-up
        series[p].prefill.push_back(f.prompt_tokens / res.value().prefill_seconds);
        series[p].decode.push_back((res.value().output_token_ids.size() - 1) / res.value().decode_seconds);
      }
    }
    std::fprintf(stderr, "\r                          \r");
    for (size_t p = 0; p < np; ++p) {
      Stats ps = stats_of(series[p].prefill), d = stats_of(series[p].decode);
      if (labelled) {
        std::printf("%-8d %-26s %14.1f %14.1f %14.1f %14.1f\n", t, labels[p].c_str(), ps.min, ps.median, d.min,
                    d.median);
      } else {
        std::printf("%-8d %14.1f %14.1f %14.1f %14.1f\n", t, ps.min, ps.median, d.min, d.median);
      }
      decode_median.push_back({t, labels[p], d.median, engines[p]->info().decode_bytes_per_token});
    }
    all.push_back(std::move(series));
  }

  if (np > 1) {
    std::printf("\nratios to %s (median of the per-repeat ratios; > 1 = faster than %s)\n", labels[0].c_str(),
                labels[0].c_str());
    std::printf("%-8s %-26s %14s %14s\n", "threads", "variants", "prefill", "decode");
    for (size_t ti = 0; ti < f.threads.size(); ++ti) {
      for (size_t p = 1; p < np; ++p) {
        const std::string label = labels[p] + "/" + labels[0];
        std::printf("%-8d %-26s %14.3f %14.3f\n", f.threads[ti], label.c_str(),
                    paired_ratio(all[ti][p].prefill, all[ti][0].prefill),
                    paired_ratio(all[ti][p].decode, all[ti][0].decode));
      }
    }
  }

  if (!f.trace.empty()) {
    Status st = engines.front()->write_trace();
    if (!st.ok()) return fail("--trace: " + st.message());
    std::fprintf(stderr, "wrote trace %s\n", f.trace.c_str());
  }
  std::fprintf(stderr, "measuring memory read bandwidth...\n");
  std::printf("\ndecode bandwidth bound: %.1f MB of weights read per decode token%s\n",
              info.decode_bytes_per_token / 1e6, f.weights.size() > 1 ? " (native; each variant's own below)" : "");
  if (labelled) {
    std::printf("%-8s %-26s %14s %16s %14s %10s\n", "threads", column, "read GB/s", "bound tok/s", "decode tok/s",
                "ratio");
  } else {
    std::printf("%-8s %14s %16s %14s %10s\n", "threads", "read GB/s", "bound tok/s", "decode tok/s", "ratio");
  }
  int probed_threads = -1;
  double bw = 0;
  for (const DecodeRow& row : decode_median) {
    if (row.threads != probed_threads) {  // one probe per thread count
      bw = measure_read_bandwidth(f.bw_buffer_mb << 20, row.threads, 5);
      probed_threads = row.threads;
    }
    const double bound = bw / static_cast<double>(row.bytes_per_token);
    if (labelled) {
      std::printf("%-8d %-26s %14.1f %16.1f %14.1f %9.0f%%\n", row.threads, row.path.c_str(), bw / 1e9, bound,
                  row.median, 100.0 * row.median / bound);
    } else {
      std::printf("%-8d %14.1f %16.1f %14.1f %9.0f%%\n", row.threads, bw / 1e9, bound, row.median,
                  100.0 * row.median / bound);
    }
  }
  return 0;
}

}  // namespace

RunFn add_bench_generate_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  app.add_option("--model", f->model, "Model directory; default: the shipped tiny-mixtral-shakespeare");
  add_config_flag(app, &f->config);
  app.add_option("--prompt-tokens", f->prompt_tokens, "Prompt length for prefill (tokens)")->capture_default_str();
  app.add_option("--gen-tokens", f->gen_tokens, "Tokens to generate for decode")->capture_default_str();
  app.add_option("--repeats", f->repeats, "Timed repeats (after one warm-up)")->capture_default_str();
  app.add_option("--threads", f->threads, "Thread counts to measure")->delimiter(',')->capture_default_str();
  app.add_option("--fp8", f->fp8, "dequant|native: FP8 weights dequantised to bf16 at load, or kept in FP8 "
                                  "(dequantised in the kernels)")
      ->capture_default_str();
  app.add_option("--kv-dtype", f->kv_dtype, "KV cache element type: f32, bf16 or f16 (GQA models only)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--mla-attention", f->mla_paths,
                 "Multi-head latent attention models: the paths to measure, from auto, naive, absorbed (e.g. "
                 "naive,absorbed: interleaved per repeat, with their ratios); other models: auto only")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--kernels", f->kernels,
                 "Kernel paths to measure, from auto, avx2, avx512, avx512-bf16 (e.g. avx2,avx512-bf16: one engine "
                 "each, interleaved per repeat, with their ratios)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--weights", f->weights, "Weight formats to measure, from native, int8 (a list, as --kernels)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--hugepages", f->hugepages,
                 "Where the weights live, from auto, on (copied into transparent huge pages), off (the mapped files): "
                 "a list, as --kernels")
      ->delimiter(',')
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--matmul-precision", f->precisions,
                 "Prefill matmul precisions to measure, from highest (f32 activations, sgemm), medium (bf16 "
                 "activations, oneDNN's AVX-512 BF16 matmul): a list, as --kernels")
      ->delimiter(',')
      ->check(CLI::IsMember({"highest", "medium"}))
      ->capture_default_str();
  app.add_flag("--batch-invariant", f->batch_invariant,
               "Batch-invariant kernels (as `moe serve` uses): GEMV for prefill instead of sgemm");
  app.add_option("--bw-buffer-mb", f->bw_buffer_mb, "Buffer for the bandwidth probe (MiB)")->capture_default_str();
  app.add_option("--trace", f->trace,
                 "Write a per-step trace (Chrome trace-event JSON, docs/tracing.md) of every run (warm-up included) "
                 "of the first --mla-attention path; summarize with `moe trace summarize`");
  return [f] { return run_bench(*f); };
}

}  // namespace moe::cli
