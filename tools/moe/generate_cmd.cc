// moe generate: text from a prompt, streamed, or one JSON object with --format json.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine_flags.h"
#include "generate_batch.h"
#include "moe/core/atomic_file.h"
#include "moe/core/text_format.h"
#include "moe/engine.h"
#include "moe/stats/expert_load_stats.h"

namespace moe::cli {
namespace {

struct GenerateFlags {
  EngineFlags engine;
  std::string prompt;
  int max_tokens = 128;
  float temperature = 0.8f;
  int top_k = 40;
  double top_p = 0.95;  // parsed as double: 1e-300 is valid (see below)
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  int64_t seed = -1;
  std::string format = "text";
  std::string logits_out;
  std::string stats_out;
  std::string prompts_file;  // several prompts through the continuous-batching scheduler
  const CLI::Option* prompt_option = nullptr;  // --prompt (required unless --prompts-file)
};

int generate_on_rank0(const GenerateFlags& f, Engine& engine, int num_ranks, bool expert_parallel,
                      std::vector<std::string> batch_prompts);

int run_generate(const GenerateFlags& f) {
  std::vector<std::string> batch_prompts;
  if (!f.prompts_file.empty()) {
    if (f.prompt_option != nullptr && f.prompt_option->count() > 0) {
      return fail("--prompt and --prompts-file exclude each other; give one");
    }
    if (!f.logits_out.empty()) return fail("--logits-out is for one --prompt, not --prompts-file");
    if (f.max_tokens < 1) {
      return fail("--max-tokens must be >= 1 with --prompts-file (got " + std::to_string(f.max_tokens) + ")");
    }
    auto prompts = read_prompts_file(f.prompts_file);
    if (!prompts.ok()) return fail(prompts.status().message());
    batch_prompts = std::move(prompts).value();
  } else if (f.prompt_option == nullptr || f.prompt_option->count() == 0) {
    std::fprintf(stderr, "error: --prompt is required (the text to continue), or --prompts-file FILE\n");
    return 2;  // a usage error, as CLI11's for a missing required option
  } else if (f.prompt.empty()) {
    return fail("--prompt is empty; give the text to continue");
  }
  if (f.max_tokens < 0) return fail("--max-tokens must be >= 0 (got " + std::to_string(f.max_tokens) + ")");
  // Sampling flags are checked here, before loading the model, so the message names the flag.
  if (!(f.temperature >= 0.0f) || !std::isfinite(f.temperature)) {
    return fail("--temperature must be a finite number >= 0 (got " + format_g(f.temperature) + ")");
  }
  if (f.top_k < 0) return fail("--top-k must be >= 0 (got " + std::to_string(f.top_k) + ")");
  if (!(f.top_p > 0.0 && f.top_p <= 1.0)) {
    return fail("--top-p must be in (0, 1] (got " + format_g(f.top_p) + ")");
  }
  if (!(f.min_p >= 0.0f && f.min_p <= 1.0f)) return fail("--min-p must be in [0, 1] (got " + format_g(f.min_p) + ")");
  for (const auto& [flag, v] : {std::pair{"--presence-penalty", f.presence_penalty},
                                std::pair{"--frequency-penalty", f.frequency_penalty}}) {
    if (!(v >= -2.0f && v <= 2.0f)) return fail(std::string(flag) + " must be in [-2, 2] (got " + format_g(v) + ")");
  }
  if (!(f.repetition_penalty > 0.0f) || !std::isfinite(f.repetition_penalty)) {
    return fail("--repetition-penalty must be a finite number > 0 (got " + format_g(f.repetition_penalty) + ")");
  }
  if (std::string bad = check_engine_flags(f.engine); !bad.empty()) return fail(bad);
  auto opened = launch_engine_from_flags(f.engine, "generate");
  if (!opened.ok()) return fail_rank(-1, opened.status());
  const int num_ranks = opened.value().num_ranks;
  auto& engine = opened.value().engine;
  const int rank = opened.value().rank;
  if (rank != 0) {
    Status st = engine->run_worker();
    if (!st.ok()) return fail_rank(rank, st);
    return write_trace_or_fail(*engine, rank, f.engine.options.trace_path);
  }
  // Rank 0 (or the only process) generates; workers are released when it returns, then
  // every rank joins the trace's gather (--trace).
  int rc = 0;
  {
    struct StopWorkers {
      Engine* e;
      ~StopWorkers() { (void)e->stop_workers(); }
    } stop_workers{engine.get()};
    rc = generate_on_rank0(f, *engine, num_ranks, opened.value().comm != nullptr, std::move(batch_prompts));
  }
  const int trace_rc = write_trace_or_fail(*engine, rank, f.engine.options.trace_path);
  return rc != 0 ? rc : trace_rc;
}

int generate_on_rank0(const GenerateFlags& f, Engine& engine_ref, int num_ranks, bool expert_parallel,
                      std::vector<std::string> batch_prompts) {
  Engine* engine = &engine_ref;
  const int rank = 0;
  if (f.max_tokens > engine->info().max_context) {
    return fail("--max-tokens " + std::to_string(f.max_tokens) + " exceeds the model's context of " +
                std::to_string(engine->info().max_context) + " tokens");
  }
  GenerateRequest req;
  if (!batch_prompts.empty()) {
    GenerateBatchInput in;
    in.prompts = std::move(batch_prompts);
    in.max_tokens = f.max_tokens;
    in.json = f.format == "json";
    in.idle_heartbeat_seconds = f.engine.idle_heartbeat_seconds();
    SamplingParams& sp = in.sampling;
    sp.temperature = f.temperature;
    sp.top_k = f.top_k;
    sp.top_p = std::max(static_cast<float>(f.top_p), std::numeric_limits<float>::denorm_min());
    sp.min_p = f.min_p;
    sp.presence_penalty = f.presence_penalty;
    sp.frequency_penalty = f.frequency_penalty;
    sp.repetition_penalty = f.repetition_penalty;
    if (f.seed >= 0) sp.seed = static_cast<uint64_t>(f.seed);
    const int rc = run_generate_batch(*engine, in);
    if (rc == 0 && !f.stats_out.empty()) {
      Status st = engine->expert_load_stats().write_json_file(f.stats_out);
      if (!st.ok()) return fail("--stats-out: " + st.message());
    }
    return rc;
  }
  req.prompt = f.prompt;
  req.max_tokens = f.max_tokens;
  req.sampling.temperature = f.temperature;
  req.sampling.top_k = f.top_k;
  // Below float's range it would round to 0: the smallest positive float keeps the same
  // nucleus (the most likely token alone).
  req.sampling.top_p = std::max(static_cast<float>(f.top_p), std::numeric_limits<float>::denorm_min());
  req.sampling.min_p = f.min_p;
  req.sampling.presence_penalty = f.presence_penalty;
  req.sampling.frequency_penalty = f.frequency_penalty;
  req.sampling.repetition_penalty = f.repetition_penalty;
  if (f.seed >= 0) req.sampling.seed = static_cast<uint64_t>(f.seed);
  req.return_prompt_logits = !f.logits_out.empty();

  const bool text_mode = f.format == "text";
  TokenCallback stream;
  if (text_mode) {
    std::fputs(f.prompt.c_str(), stdout);
    std::fflush(stdout);
    stream = [](int, const std::string& delta) {
      std::fputs(delta.c_str(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto result = engine->generate(req, stream);
  if (!result.ok()) {
    if (text_mode) std::fputs("\n", stdout);
    return fail_rank(rank, result.status());
  }
  const GenerateResult& r = result.value();
  if (f.engine.options.rebalance_every > 0) {
    const Engine::EpStats ep = engine->ep_stats();
    std::fprintf(stderr, "[rebalancing: %lld plans applied, %lld failed, %lld not worth moving, %lld experts moved, "
                 "%.1f ms]\n",
                 static_cast<long long>(ep.rebalances), static_cast<long long>(ep.rebalance_failures),
                 static_cast<long long>(ep.rebalances_skipped), static_cast<long long>(ep.experts_moved),
                 ep.rebalance_seconds * 1e3);
  }
  if (!f.stats_out.empty()) {
    Status st = engine->expert_load_stats().write_json_file(f.stats_out);
    if (!st.ok()) return fail("--stats-out: " + st.message());
  }
  if (!f.logits_out.empty()) {
    const std::string_view bytes(reinterpret_cast<const char*>(r.prompt_logits.data()),
                                 r.prompt_logits.size() * sizeof(float));
    Status st = write_file_atomically(f.logits_out, bytes);
    if (!st.ok()) return fail("cannot write --logits-out file " + f.logits_out + ": " + st.message());
  }
  if (text_mode) {
    std::fputs("\n", stdout);
    const double prefill_tps = r.prefill_seconds > 0 ? r.prompt_token_ids.size() / r.prefill_seconds : 0;
    const size_t steps = r.output_token_ids.empty() ? 0 : r.output_token_ids.size() - 1;
    const double decode_tps = r.decode_seconds > 0 ? steps / r.decode_seconds : 0;
    std::fprintf(stderr, "[prompt %zu tokens, %.1f tok/s | generated %zu tokens, %.1f tok/s | finish: %s]\n",
                 r.prompt_token_ids.size(), prefill_tps, r.output_token_ids.size(), decode_tps,
                 r.finish_reason.c_str());
    if (expert_parallel) {
      const Engine::EpStats ep = engine->ep_stats();
      const int tp = std::max(f.engine.launch.tp, 1);
      const std::string layout = tp > 1 ? "tensor x expert parallel: tp " + std::to_string(tp) + " x ep " +
                                              std::to_string(num_ranks / tp) + " = " + std::to_string(num_ranks)
                                        : "expert parallel: " + std::to_string(num_ranks);
      std::fprintf(stderr, "[%s ranks, %lld MoE exchanges, %.1f MB sent by rank 0, "
                   "comm wait %.1f ms, expert compute %.1f ms, comm_overlap_ratio %.3f]\n",
                   layout.c_str(), static_cast<long long>(ep.calls), ep.bytes_sent / 1e6, ep.comm_wait_seconds * 1e3,
                   ep.compute_seconds * 1e3, ep.comm_overlap_ratio);

    }
  } else {
    nlohmann::json j;
    j["prompt_token_ids"] = r.prompt_token_ids;
    j["output_token_ids"] = r.output_token_ids;
    j["text"] = r.text;
    j["finish_reason"] = r.finish_reason;
    if (expert_parallel) {  // rank 0's exchange timings (with the overlap's hidden fraction)
      const Engine::EpStats ep = engine->ep_stats();
      j["ep"] = {{"bytes_sent", ep.bytes_sent},
                 {"comm_wait_seconds", ep.comm_wait_seconds},
                 {"exchange_seconds", ep.exchange_seconds},
                 {"compute_seconds", ep.compute_seconds},
                 {"comm_overlap_ratio", ep.comm_overlap_ratio}};
    }
    // Invalid UTF-8 (a cut multi-byte character) is replaced, never thrown.
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace

RunFn add_generate_command(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  f->prompt_option = app.add_option("--prompt", f->prompt, "Text to continue (required unless --prompts-file)");
  app.add_option("--prompts-file", f->prompts_file,
                 "Generate several prompts together (continuous batching; one per non-empty line, \\n for a "
                 "newline): one JSON line each with --format json; under --dp-attention spread over the groups");
  app.add_option("--max-tokens", f->max_tokens, "New tokens at most (stops earlier at EOS)")->capture_default_str();
  app.add_option("--temperature", f->temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-k", f->top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
  app.add_option("--top-p", f->top_p, "Nucleus sampling mass in (0, 1]; 1 = off")->capture_default_str();
  app.add_option("--min-p", f->min_p,
                 "Drop tokens less likely than this fraction of the most likely one, in [0, 1]; 0 = off")
      ->capture_default_str();
  app.add_option("--presence-penalty", f->presence_penalty,
                 "Subtract this from the logit of every token already generated, in [-2, 2]; 0 = off")
      ->capture_default_str();
  app.add_option("--frequency-penalty", f->frequency_penalty,
                 "Subtract this times its count from the logit of each generated token, in [-2, 2]; 0 = off")
      ->capture_default_str();
  app.add_option("--repetition-penalty", f->repetition_penalty,
                 "Divide positive (multiply negative) logits of tokens in the prompt or output by this, > 0; 1 = off")
      ->capture_default_str();
  app.add_option("--seed", f->seed, "Random seed (reproducible output); default: random");
  app.add_option("--format", f->format, "Output: text (streamed) or json (one object)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--logits-out", f->logits_out, "Write the last prompt position's logits (f32 little-endian)");
  app.add_option("--stats-out", f->stats_out,
                 "Write per-layer, per-expert load statistics (JSON; plot with moe stats plot)");
  add_engine_flags(app, &f->engine, /*batch_invariant_default=*/false);
  return [f] { return run_generate(*f); };
}

}  // namespace moe::cli
