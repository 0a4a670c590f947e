// moe bench batch: the continuous-batching engine alone (Scheduler, no HTTP): N requests
// submitted at once, decode tokens/s and step time as N grows, vs N = 1. Separates the
// engine's batching gain from the serving stack's per-token costs (`moe bench serve`).
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "commands.h"
#include "config_apply.h"
#include "moe/core/clock.h"
#include "moe/engine.h"
#include "moe/scheduler.h"

namespace moe::cli {
namespace {

struct BatchFlags {
  std::string model;
  std::string config;  // --config FILE.yaml (config_apply.h)
  std::vector<int> batch = {1, 4, 16, 32};
  int prompt_tokens = 64;
  int gen_tokens = 128;
  int threads = 1;
  std::string batch_invariant = "true";
};

// Runs n requests together; returns seconds from submit to the last token.
StatusOr<double> run_batch(Engine& engine, int n, const BatchFlags& f) {
  SchedulerOptions so;
  so.max_num_seqs = std::max(n, 1);
  so.max_num_batched_tokens = std::max(512, n);
  MOE_ASSIGN_OR_RETURN(auto sched, Scheduler::create(&engine, so));
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  const int vocab = engine.info().vocab_size;
  const double t0 = now_seconds();
  for (int i = 0; i < n; ++i) {
    SeqRequest r;
    for (int t = 0; t < f.prompt_tokens; ++t) r.prompt_token_ids.push_back(3 + (i * 7919 + t * 104729) % (vocab - 3));
    r.max_tokens = f.gen_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    MOE_ASSIGN_OR_RETURN(uint64_t id, sched->submit(r, [&](SeqEvent&& ev) {
      if (!ev.finished) return;
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    }));
    (void)id;
  }
  std::thread stopper([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == n; });
    sched->shutdown(0);
  });
  Status st = sched->run();
  stopper.join();
  MOE_RETURN_IF_ERROR(st);
  return now_seconds() - t0;
}

int run_bench_batch(const BatchFlags& f) {
  if (f.prompt_tokens < 1 || f.gen_tokens < 1) return fail("--prompt-tokens and --gen-tokens must be >= 1");
  if (f.threads < 1) return fail("--threads must be >= 1");
  if (f.batch_invariant != "true" && f.batch_invariant != "false") {
    return fail("--batch-invariant must be true or false (got '" + f.batch_invariant + "')");
  }
  for (int n : f.batch) {
    if (n < 1) return fail("--batch values must be >= 1");
  }
  EngineOptions eo{.model_dir = f.model.empty() ? default_model_dir() : f.model, .num_threads = f.threads};
  eo.batch_invariant = f.batch_invariant == "true";
  std::fprintf(stderr, "loading model...\n");
  auto engine = Engine::open(eo);
  if (!engine.ok()) return fail(engine.status().message());
  if (f.prompt_tokens + f.gen_tokens > engine.value()->info().max_context) {
    return fail("--prompt-tokens + --gen-tokens exceeds the model's context of " +
                std::to_string(engine.value()->info().max_context));
  }
  std::printf("model %s, %d prompt + %d generated tokens per request, %d thread(s), batch-invariant %s\n",
              engine.value()->info().model_dir.c_str(), f.prompt_tokens, f.gen_tokens, f.threads,
              f.batch_invariant.c_str());
  std::printf("%8s %12s %14s %12s %10s\n", "requests", "seconds", "gen tok/s", "ms/step", "vs N=1");
  (void)run_batch(*engine.value(), 1, f);  // warm-up
  double base = 0;
  for (int n : f.batch) {
    std::fprintf(stderr, "running %d requests...\n", n);
    auto s = run_batch(*engine.value(), n, f);
    if (!s.ok()) return fail(s.status().message());
    const double tps = static_cast<double>(n) * f.gen_tokens / s.value();
    if (base == 0) base = tps / n * 1.0;  // tokens/s of one request alone (first entry)
    const double steps = f.gen_tokens + static_cast<double>(f.prompt_tokens) * n / 512.0;
    std::printf("%8d %12.3f %14.0f %12.3f %9.2fx\n", n, s.value(), tps, s.value() / steps * 1e3,
                tps / (base * (f.batch.front() == 1 ? 1 : f.batch.front())));
  }
  return 0;
}

}  // namespace

RunFn add_bench_batch_command(CLI::App& app) {
  auto f = std::make_shared<BatchFlags>();
  app.add_option("--model", f->model, "Model directory; default: the shipped tiny-mixtral-shakespeare");
  add_config_flag(app, &f->config);
  app.add_option("--batch", f->batch, "Requests run together (comma-separated)")->delimiter(',')->capture_default_str();
  app.add_option("--prompt-tokens", f->prompt_tokens, "Prompt tokens per request")->capture_default_str();
  app.add_option("--gen-tokens", f->gen_tokens, "Generated tokens per request")->capture_default_str();
  app.add_option("--threads", f->threads, "CPU threads")->capture_default_str();
  app.add_option("--batch-invariant", f->batch_invariant, "true|false: batch-invariant kernels")->capture_default_str();
  return [f] { return run_bench_batch(*f); };
}

}  // namespace moe::cli
