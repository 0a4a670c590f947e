// moe generate --prompts-file (generate_batch.h).
#include "generate_batch.h"

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/core/clock.h"
#include "moe/scheduler.h"

namespace moe::cli {
namespace {

std::string unescape_newlines(const std::string& line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += line[i];
    }
  }
  return out;
}

struct Output {
  std::vector<int> token_ids;
  std::vector<float> logprobs;
  std::string text, finish_reason, error;
  int prompt_tokens = 0;
  bool done = false;
};

}  // namespace

StatusOr<std::vector<std::string>> read_prompts_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalid_argument("--prompts-file " + path + ": cannot be read");
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(unescape_newlines(line));
  }
  if (prompts.empty()) return invalid_argument("--prompts-file " + path + ": no prompt (one per non-empty line)");
  return prompts;
}

int run_generate_batch(Engine& engine, const GenerateBatchInput& in) {
  const int n = static_cast<int>(in.prompts.size());
  SchedulerOptions so;
  so.max_num_seqs = n;
  so.max_num_batched_tokens = std::max(512, n);
  so.idle_heartbeat_seconds = in.idle_heartbeat_seconds;
  auto sched = Scheduler::create(&engine, so);
  if (!sched.ok()) return fail(sched.status().message());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Output> out(static_cast<size_t>(n));
  int done = 0;
  // A one-token warm-up step outside the timing: every rank's KV pool (the scheduler's on
  // rank 0, each DP-attention group's on first use) is allocated and touched here.
  {
    SeqRequest warm;
    warm.prompt_token_ids = {engine.tokenize(in.prompts[0]).front()};
    warm.max_tokens = 1;
    warm.sampling.temperature = 0;
    bool warm_done = false;
    auto id = (*sched)->submit(warm, [&](SeqEvent&& ev) {
      if (!ev.finished) return;
      std::lock_guard<std::mutex> lock(mu);
      warm_done = true;
      cv.notify_all();
    });
    if (!id.ok()) return fail(id.status().message());
    std::thread stop_warm([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return warm_done; });
      (*sched)->shutdown(0);
    });
    const Status st = (*sched)->run();
    stop_warm.join();
    if (!st.ok()) return fail(st.message());
    engine.clear_expert_load_stats();
  }
  sched = Scheduler::create(&engine, so);
  if (!sched.ok()) return fail(sched.status().message());
  const double t0 = now_seconds();
  for (int i = 0; i < n; ++i) {
    SeqRequest r;
    r.prompt = in.prompts[static_cast<size_t>(i)];
    r.max_tokens = in.max_tokens;
    r.sampling = in.sampling;
    if (in.sampling.seed) r.sampling.seed = *in.sampling.seed + static_cast<uint64_t>(i);
    r.logprobs = 0;  // each token's own logprob
    auto id = (*sched)->submit(r, [&, i](SeqEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu);
      Output& o = out[static_cast<size_t>(i)];
      o.token_ids.insert(o.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const TokenLogprob& lp : ev.logprobs) o.logprobs.push_back(lp.logprob);
      o.text += ev.text;
      if (!ev.finished) return;
      o.finish_reason = ev.finish_reason;
      o.error = ev.error;
      o.prompt_tokens = ev.prompt_tokens;
      o.done = true;
      ++done;
      cv.notify_all();
    });
    if (!id.ok()) {
      (*sched)->shutdown(0);
      (void)(*sched)->run();
      return fail("prompt " + std::to_string(i + 1) + " of --prompts-file: " + id.status().message());
    }
  }
  std::thread stopper([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == n; });
    (*sched)->shutdown(0);
  });
  const Status st = (*sched)->run();
  if (!st.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = n;  // release the stopper
    }
    cv.notify_all();
  }
  stopper.join();
  if (!st.ok()) return fail(st.message());
  const double secs = now_seconds() - t0;
  int64_t prompt_tokens = 0, generated = 0;
  for (int i = 0; i < n; ++i) {
    const Output& o = out[static_cast<size_t>(i)];
    if (!o.error.empty()) return fail("prompt " + std::to_string(i + 1) + ": " + o.error);
    prompt_tokens += o.prompt_tokens;
    generated += static_cast<int64_t>(o.token_ids.size());
    if (in.json) {
      nlohmann::json j;
      j["index"] = i;
      j["output_token_ids"] = o.token_ids;
      j["logprobs"] = o.logprobs;
      j["text"] = o.text;
      j["finish_reason"] = o.finish_reason;
      std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("--- %d ---\n%s%s\n", i + 1, in.prompts[static_cast<size_t>(i)].c_str(), o.text.c_str());
    }
  }
  std::fflush(stdout);
  std::fprintf(stderr, "[batch %d prompts, %lld prompt tokens, %lld tokens generated in %.3f s, %.1f tok/s]\n", n,
               static_cast<long long>(prompt_tokens), static_cast<long long>(generated), secs,
               secs > 0 ? generated / secs : 0.0);
  return 0;
}

}  // namespace moe::cli
