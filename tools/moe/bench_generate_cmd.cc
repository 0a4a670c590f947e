// moe bench generate: prefill and decode tokens/s at 1 and 2 threads (min/median over
// repeats), and decode against the memory-bandwidth bound.
#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <vector>

#include "commands.h"
#include "moe/core/membw.h"
#include "moe/engine.h"

namespace moe::cli {
namespace {

struct BenchFlags {
  std::string model;
  int prompt_tokens = 256;
  int gen_tokens = 64;
  int repeats = 5;
  std::vector<int> threads = {1, 2};
  size_t bw_buffer_mb = 1024;
  bool batch_invariant = false;
  std::string fp8 = "dequant";
};

struct Stats {
  double min = 0, median = 0, max = 0;
};

Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

int run_bench(const BenchFlags& f) {
  if (f.prompt_tokens < 1) return fail("--prompt-tokens must be >= 1");
  if (f.gen_tokens < 2) return fail("--gen-tokens must be >= 2");
  if (f.repeats < 1) return fail("--repeats must be >= 1");
  for (int t : f.threads) {
    if (t < 1) return fail("--threads values must be >= 1");
  }
  std::fprintf(stderr, "loading model...\n");
  EngineOptions eo{.model_dir = f.model.empty() ? default_model_dir() : f.model};
  eo.batch_invariant = f.batch_invariant;
  if (f.fp8 != "native" && f.fp8 != "dequant") return fail("--fp8 must be native or dequant (got '" + f.fp8 + "')");
  eo.fp8_mode = f.fp8 == "dequant" ? Fp8Mode::kDequant : Fp8Mode::kNative;
  auto engine_or = Engine::open(eo);
  if (!engine_or.ok()) return fail(engine_or.status().message());
  Engine& engine = *engine_or.value();
  const ModelInfo& info = engine.info();
  if (static_cast<int64_t>(f.prompt_tokens) + f.gen_tokens > info.max_context) {  // no int overflow
    return fail("--prompt-tokens + --gen-tokens exceeds the model's context of " + std::to_string(info.max_context));
  }
  std::printf("model: %s (%s), %.1fM parameters, %.1fM active per token, weights %.1f MB\n", info.model_dir.c_str(),
              info.model_type.c_str(), info.num_parameters / 1e6, info.num_active_parameters / 1e6,
              info.weight_bytes / 1e6);
  std::printf("prompt %d tokens, %d generated tokens, %d repeats (+1 warm-up)\n\n", f.prompt_tokens, f.gen_tokens,
              f.repeats);

  // A fixed pseudo-random prompt of ordinary tokens (no BOS/EOS inside).
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> tok(3, info.vocab_size - 1);
  GenerateRequest req;
  req.prompt_token_ids.push_back(1);
  while (static_cast<int>(req.prompt_token_ids.size()) < f.prompt_tokens) req.prompt_token_ids.push_back(tok(rng));
  req.max_tokens = f.gen_tokens;
  req.sampling.temperature = 0;
  req.ignore_eos = true;

  std::printf("%-8s %14s %14s %14s %14s\n", "threads", "prefill min", "prefill med", "decode min", "decode med");
  std::printf("%-8s %14s %14s %14s %14s\n", "", "tok/s", "tok/s", "tok/s", "tok/s");
  std::vector<std::pair<int, double>> decode_median;
  for (int t : f.threads) {
    Engine::set_num_threads(t);
    std::vector<double> prefill, decode;
    for (int r = 0; r <= f.repeats; ++r) {
      std::fprintf(stderr, "\rthreads %d: run %d/%d", t, r, f.repeats);
      auto res = engine.generate(req);
      if (!res.ok()) return fail(res.status().message());
      if (r == 0) continue;  // warm-up
      prefill.push_back(f.prompt_tokens / res.value().prefill_seconds);
      decode.push_back((res.value().output_token_ids.size() - 1) / res.value().decode_seconds);
    }
    std::fprintf(stderr, "\r                          \r");
    Stats p = stats_of(prefill), d = stats_of(decode);
    std::printf("%-8d %14.1f %14.1f %14.1f %14.1f\n", t, p.min, p.median, d.min, d.median);
    decode_median.push_back({t, d.median});
  }

  std::fprintf(stderr, "measuring memory read bandwidth...\n");
  std::printf("\ndecode bandwidth bound: %.1f MB of weights read per decode token\n",
              info.decode_bytes_per_token / 1e6);
  std::printf("%-8s %14s %16s %14s %10s\n", "threads", "read GB/s", "bound tok/s", "decode tok/s", "ratio");
  for (auto [t, d] : decode_median) {
    const double bw = measure_read_bandwidth(f.bw_buffer_mb << 20, t, 5);
    const double bound = bw / static_cast<double>(info.decode_bytes_per_token);
    std::printf("%-8d %14.1f %16.1f %14.1f %9.0f%%\n", t, bw / 1e9, bound, d, 100.0 * d / bound);
  }
  return 0;
}

}  // namespace

RunFn add_bench_generate_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  app.add_option("--model", f->model, "Model directory; default: the shipped tiny-mixtral-shakespeare");
  app.add_option("--prompt-tokens", f->prompt_tokens, "Prompt length for prefill (tokens)")->capture_default_str();
  app.add_option("--gen-tokens", f->gen_tokens, "Tokens to generate for decode")->capture_default_str();
  app.add_option("--repeats", f->repeats, "Timed repeats (after one warm-up)")->capture_default_str();
  app.add_option("--threads", f->threads, "Thread counts to measure")->delimiter(',')->capture_default_str();
  app.add_option("--fp8", f->fp8, "dequant|native: FP8 weights dequantised to bf16 at load, or kept in FP8 "
                                  "(dequantised in the kernels)")
      ->capture_default_str();
  app.add_flag("--batch-invariant", f->batch_invariant,
               "Batch-invariant kernels (as `moe serve` uses): GEMV for prefill instead of sgemm");
  app.add_option("--bw-buffer-mb", f->bw_buffer_mb, "Buffer for the bandwidth probe (MiB)")->capture_default_str();
  return [f] { return run_bench(*f); };
}

}  // namespace moe::cli
