// moe bench perplexity: held-out perplexity of a model through the engine (Scheduler,
// prompt logprobs), with every engine flag applied: the quality cost of --adaptive-k,
// a capacity policy or any other routing change, and what it saved (expert assignments
// run, adaptive sheds, drops, all-to-all bytes under EP).
//
// The text from --offset is tokenized once (no BOS) and cut into windows of BOS +
// (--window - 1) tokens, as the shipped models' cards and tools/reference/make_golden.py
// do; NLL = the mean over every window's predicted tokens of -log p(token | prefix).
// --batch windows are submitted at a time and prefilled in one step (the step's load:
// adaptive k and capacity act per step on batch * window tokens).
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine_flags.h"
#include "moe/core/clock.h"
#include "moe/core/text_format.h"
#include "moe/engine.h"
#include "moe/scheduler.h"
#include "moe/stats/expert_load_stats.h"

namespace moe::cli {
namespace {

struct PerplexityFlags {
  EngineFlags engine;
  std::string text_file;
  int64_t offset = 1059636;  // Tiny Shakespeare's held-out split (the model cards)
  int window = 256;
  int windows = 0;  // 0 = all whole windows
  int batch = 4;
  std::string json_out;
};

// Sum of -logprob over the windows' predicted tokens; windows run `batch` at a time.
StatusOr<double> run_windows(Engine& engine, const std::vector<std::vector<int>>& windows, int batch) {
  SchedulerOptions so;
  so.max_num_seqs = batch;
  so.max_num_batched_tokens = batch * static_cast<int>(windows.front().size() + 1);
  MOE_ASSIGN_OR_RETURN(auto sched, Scheduler::create(&engine, so));
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  double nll = 0;
  std::string error;
  for (const std::vector<int>& w : windows) {
    SeqRequest r;
    r.prompt_token_ids = w;
    r.max_tokens = 1;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.prompt_logprobs = 0;
    MOE_ASSIGN_OR_RETURN(uint64_t id, sched->submit(r, [&](SeqEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu);
      for (size_t i = 1; i < ev.prompt_logprobs.size(); ++i) nll -= ev.prompt_logprobs[i].logprob;
      if (!ev.finished) return;
      if (ev.finish_reason == "error" && error.empty()) error = ev.error;
      ++done;
      cv.notify_all();
    }));
    (void)id;
  }
  std::thread stopper([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == windows.size(); });
    sched->shutdown(0);
  });
  Status st = sched->run();
  stopper.join();
  MOE_RETURN_IF_ERROR(st);
  if (!error.empty()) return internal_error("a window failed: " + error);
  return nll;
}

int run_bench_perplexity(const PerplexityFlags& f) {
  if (std::string bad = check_engine_flags(f.engine); !bad.empty()) return fail(bad);
  if (f.window < 2) return fail("--window must be >= 2 (got " + std::to_string(f.window) + ")");
  if (f.windows < 0) return fail("--windows must be >= 0 (got " + std::to_string(f.windows) + ")");
  if (f.batch < 1) return fail("--batch must be >= 1 (got " + std::to_string(f.batch) + ")");
  if (f.offset < 0) return fail("--offset must be >= 0 (got " + std::to_string(f.offset) + ")");
  std::ifstream in(f.text_file, std::ios::binary);
  if (!in) return fail("--text: cannot read '" + f.text_file + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (static_cast<size_t>(f.offset) >= text.size()) {
    return fail("--offset " + std::to_string(f.offset) + " is past the end of '" + f.text_file + "' (" +
                std::to_string(text.size()) + " bytes)");
  }
  auto opened = launch_engine_from_flags(f.engine, "bench perplexity");
  if (!opened.ok()) return fail_rank(-1, opened.status());
  auto& engine = opened.value().engine;
  const int rank = opened.value().rank;
  if (rank != 0) {
    Status st = engine->run_worker();
    return st.ok() ? 0 : fail_rank(rank, st);
  }
  struct StopWorkers {
    Engine* e;
    ~StopWorkers() { (void)e->stop_workers(); }
  } stop_workers{engine.get()};
  if (f.window > engine->info().max_context) {
    return fail("--window " + std::to_string(f.window) + " exceeds the model's context of " +
                std::to_string(engine->info().max_context));
  }
  // Tokenized without BOS: BOS (the first token of engine->tokenize("")) heads each window.
  const std::vector<int> bos = engine->tokenize("");
  std::vector<int> ids = engine->tokenize(text.substr(static_cast<size_t>(f.offset)));
  ids.erase(ids.begin(), ids.begin() + static_cast<int64_t>(std::min(bos.size(), ids.size())));
  std::vector<std::vector<int>> windows;
  const size_t per = static_cast<size_t>(f.window) - bos.size();
  for (size_t p = 0; p + per <= ids.size(); p += per) {
    if (f.windows > 0 && windows.size() == static_cast<size_t>(f.windows)) break;
    std::vector<int> w = bos;
    w.insert(w.end(), ids.begin() + static_cast<int64_t>(p), ids.begin() + static_cast<int64_t>(p + per));
    windows.push_back(std::move(w));
  }
  if (windows.empty()) return fail("--text from --offset holds fewer than one window of tokens");
  engine->clear_expert_load_stats();
  const Engine::EpStats ep0 = engine->ep_stats();
  const double t0 = now_seconds();
  auto nll = run_windows(*engine, windows, f.batch);
  if (!nll.ok()) return fail_rank(0, nll.status());
  const double seconds = now_seconds() - t0;
  const Engine::EpStats ep1 = engine->ep_stats();
  const int64_t predicted = static_cast<int64_t>(windows.size() * (static_cast<size_t>(f.window) - 1));
  const double mean = nll.value() / static_cast<double>(predicted);
  // Totals over the MoE layers: assignments run, adaptive sheds, drops, requeues.
  const ExpertLoadStats& st = engine->expert_load_stats();
  int64_t assignments = 0, shed = 0, shed_tokens = 0, dropped = 0, requeued = 0, rerouted = 0;
  for (int l : st.layer_ids()) {
    assignments += st.total_tokens(l);
    shed += st.adaptive_dropped(l);
    shed_tokens += st.adaptive_tokens(l);
    dropped += st.dropped(l);
    requeued += st.requeued(l);
    rerouted += st.rerouted(l);
  }
  const int64_t routed_tokens = static_cast<int64_t>(windows.size()) * f.window * st.num_layers();
  const double k_mean = static_cast<double>(assignments) / static_cast<double>(std::max<int64_t>(routed_tokens, 1));
  std::printf("model %s: %zu windows of %d tokens (%lld predicted), %d windows per step\n",
              engine->info().model_dir.c_str(), windows.size(), f.window, static_cast<long long>(predicted), f.batch);
  std::printf("NLL %.4f nats/token, perplexity %.3f\n", mean, std::exp(mean));
  std::printf("experts per token (mean over MoE layers) %.4f of %d; shed by adaptive k %lld (%lld token-layers), "
              "dropped %lld, requeued %lld, rerouted %lld\n",
              k_mean, engine->info().top_k, static_cast<long long>(shed), static_cast<long long>(shed_tokens),
              static_cast<long long>(dropped), static_cast<long long>(requeued), static_cast<long long>(rerouted));
  const int64_t bytes = ep1.bytes_sent - ep0.bytes_sent;
  const double expert_s = ep1.compute_seconds - ep0.compute_seconds;
  if (opened.value().comm != nullptr) {
    std::printf("rank 0: all-to-all bytes sent %lld, EP expert compute %.3f s, wall %.2f s\n",
                static_cast<long long>(bytes), expert_s, seconds);
  } else {
    std::printf("wall %.2f s (single process: no all-to-all)\n", seconds);
  }
  if (!f.json_out.empty()) {
    nlohmann::json j = {{"nll", mean},
                        {"perplexity", std::exp(mean)},
                        {"windows", windows.size()},
                        {"window", f.window},
                        {"batch", f.batch},
                        {"experts_per_token", k_mean},
                        {"assignments", assignments},
                        {"adaptive_dropped", shed},
                        {"adaptive_tokens", shed_tokens},
                        {"dropped", dropped},
                        {"requeued", requeued},
                        {"rerouted", rerouted},
                        {"a2a_bytes_rank0", bytes},
                        {"ep_expert_seconds_rank0", expert_s},
                        {"seconds", seconds}};
    std::ofstream out(f.json_out);
    out << j.dump(2) << "\n";
    if (!out) return fail("--json: cannot write '" + f.json_out + "'");
  }
  return 0;
}

}  // namespace

RunFn add_bench_perplexity_command(CLI::App& app) {
  auto f = std::make_shared<PerplexityFlags>();
  add_engine_flags(app, &f->engine, /*batch_invariant_default=*/false);
  app.add_option("--text", f->text_file, "Text file (e.g. shared/data/tinyshakespeare.txt)")->required();
  app.add_option("--offset", f->offset, "Byte offset of the held-out text (Tiny Shakespeare's split: 1059636)")
      ->capture_default_str();
  app.add_option("--window", f->window, "Tokens per window, BOS included")->capture_default_str();
  app.add_option("--windows", f->windows, "Windows to score; 0 = every whole window")->capture_default_str();
  app.add_option("--batch", f->batch, "Windows prefilled together in one step (the step's load)")
      ->capture_default_str();
  app.add_option("--json", f->json_out, "Also write the figures as JSON to this file");
  return [f] { return run_bench_perplexity(*f); };
}

}  // namespace moe::cli
