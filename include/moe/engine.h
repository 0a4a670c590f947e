// moe::Engine: load a Hugging Face MoE checkpoint and generate text.
//
//   auto engine = moe::Engine::open({.model_dir = "models/tiny-mixtral-shakespeare"});
//   moe::GenerateRequest req{.prompt = "ROMEO:", .max_tokens = 32};
//   req.sampling.temperature = 0;  // greedy
//   auto result = engine.value()->generate(req);
//
// Thread-safety: one Engine serves one generate() call at a time (not re-entrant).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moe/engine_options.h"
#include "moe/generation_types.h"
#include "moe/status.h"

namespace moe {

class ExpertLoadStats;  // src/moe/stats/expert_load_stats.h
struct EngineCore;      // src/moe/engine/engine_core.h (internal)

struct GenerateRequest {
  std::string prompt;                  // tokenized with BOS per tokenizer_config
  std::vector<int> prompt_token_ids{}; // used instead of `prompt` when non-empty
  int max_tokens = 128;                // new tokens at most; generation also stops at EOS
  SamplingParams sampling{};
  bool return_prompt_logits = false;   // fill GenerateResult::prompt_logits
  bool ignore_eos = false;             // keep generating past EOS (benchmarks)
};

struct GenerateResult {
  std::vector<int> prompt_token_ids;
  std::vector<int> output_token_ids;   // includes the EOS token if one ended generation
  std::string text;                    // decoded continuation (special tokens dropped)
  std::string finish_reason;           // "stop" (EOS) or "length" (max_tokens)
  std::vector<float> prompt_logits;    // [vocab] logits at the last prompt position
  double prefill_seconds = 0;
  double decode_seconds = 0;           // all decode steps together
};

// Called once per new token, with the text it adds (may be empty while a multi-byte
// character is incomplete). Return false to stop generation.
using TokenCallback = std::function<bool(int token_id, const std::string& text_delta)>;

class Engine {
 public:
  // Loads config, weights (memory-mapped, validated) and tokenizer. Errors name the
  // offending file, tensor or field.
  static StatusOr<std::unique_ptr<Engine>> open(const EngineOptions& options);
  ~Engine();

  // InvalidArgument for an empty prompt, token ids outside the vocabulary,
  // max_tokens < 0, bad sampling values, or prompt + max_tokens beyond the context
  // (src/moe/engine/request_validation.h); nothing is generated then.
  StatusOr<GenerateResult> generate(const GenerateRequest& request, const TokenCallback& on_token = nullptr);

  const ModelInfo& info() const;

  // Under expert parallelism rank 0 calls generate() (or runs a Scheduler); every other
  // rank calls run_worker(), which joins each step's expert exchanges until rank 0
  // calls stop_workers() (src/moe/runtime/ep_session.h). Rank 0 must call
  // stop_workers() when it is done, on error paths too: destroying the Engine does not
  // release the workers (they would wait until the communicator's timeout).
  // run_worker(): FailedPrecondition on rank 0 or without EP; communication or step
  // errors. stop_workers(): idempotent; OK without EP and on other ranks.
  Status run_worker();
  Status stop_workers();
  // With EngineOptions::trace_path: gathers every rank's trace to rank 0, which writes
  // the file. Collective under EP: every rank calls it once, after run_worker() returned
  // (workers) or stop_workers() (rank 0). OK, doing nothing, when tracing is off.
  // Errors: the communicator's; Internal naming the file when rank 0 cannot write it.
  Status write_trace();
  // Communication vs compute time of the expert-parallel layers so far (seconds).
  struct EpStats {
    double comm_wait_seconds = 0, compute_seconds = 0, exchange_seconds = 0;
    // The fraction of the exchanges' time hidden behind compute: 1 - comm_wait_seconds /
    // exchange_seconds, in [0, 1] (0 without overlap or before any exchange).
    double comm_overlap_ratio = 0;
    int64_t calls = 0, bytes_sent = 0;
    // Live rebalancing: plans switched to, failed migrations, experts moved (all
    // ranks), seconds spent planning and migrating.
    int64_t rebalances = 0, rebalance_failures = 0, experts_moved = 0;
    int64_t rebalances_skipped = 0;  // plans not worth their migration (min gain)
    double rebalance_seconds = 0;
    // Per-link traffic of the flat all-to-all: bytes this rank sent to / received from
    // each rank ([EP group size]; this rank's own entry: rows it kept). Empty before
    // the first exchange and without EP.
    std::vector<int64_t> bytes_to_rank, bytes_from_rank;
    int rank = 0;  // this rank in the EP group
  };
  EpStats ep_stats() const;
  // Per-layer, per-expert routing load since open() (or the last clear): assignments
  // run per expert (after the capacity policy), their per-step EMA, dropped and
  // rerouted counts. Global over the EP group and identical on every rank. Valid until
  // the Engine is destroyed; not to be read while generate()/run_worker() runs.
  const ExpertLoadStats& expert_load_stats() const;
  void clear_expert_load_stats();
  // Sets the OpenMP thread count used by kernels (n >= 1).
  static void set_num_threads(int n);
  // Tokenizer access for tools.
  std::vector<int> tokenize(const std::string& text) const;
  std::string detokenize(const std::vector<int>& ids) const;

  // Internal: the decoder, tokenizer, config, load statistics and EP session that the
  // Scheduler drives for batched steps (src/moe/engine/engine_core.h). Not part of the
  // public API; valid for the Engine's lifetime.
  EngineCore& core();

  struct Impl;  // implementation detail (src/moe/engine/engine_impl.h)

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe
