// Continuous batching (Orca, Yu et al. OSDI'22; vLLM's scheduler, Kwon et al. SOSP'23):
// requests join and leave the running batch at step boundaries; each step runs one
// forward pass over the decode tokens of every running sequence plus prompt chunks
// (chunked prefill) up to a token budget. The KV cache is a pool of fixed-size blocks
// (src/moe/transformer/paged_kv_cache.h); a request is admitted only when blocks for its
// prompt + max_tokens are free (so it never has to be preempted), otherwise it waits.
//
// Threads: submit()/cancel()/snapshot() from any thread; run() on one thread, which
// owns the Engine for the scheduler's lifetime. Under expert parallelism the scheduler
// runs on rank 0 only; the other ranks call Engine::run_worker() and join every step
// (src/moe/runtime/ep_session.h), until rank 0 calls Engine::stop_workers() after run().
#pragma once

#include <cstdint>
#include <memory>

#include "moe/engine.h"
#include "moe/generation_service.h"

namespace moe {

struct SchedulerOptions {
  int max_num_seqs = 32;              // sequences in the running batch at most
  int max_num_batched_tokens = 512;   // tokens per step at most (decodes + prompt chunks)
  int kv_block_size = 16;             // tokens per KV-cache block
  int64_t kv_cache_tokens = 0;        // pool size in tokens; 0 = max_num_seqs * context
  // Under EP, while idle rank 0 tells the workers so this often (seconds), since they
  // wait for the next step with the communicator's timeout; must be well below it.
  double idle_heartbeat_seconds = 5.0;
  // health() reports "stalled" while one step has been running longer than this
  // (seconds; a stuck peer), well before the communicator's timeout fails it. > 0.
  double liveness_timeout_seconds = 10.0;
};

class Scheduler final : public GenerationService {
 public:
  // `engine` is not owned and must outlive the scheduler. InvalidArgument for
  // non-positive options or a pool smaller than one block.
  static StatusOr<std::unique_ptr<Scheduler>> create(Engine* engine, const SchedulerOptions& options);
  ~Scheduler() override;

  // The step loop, on the calling thread: blocks until shutdown() and every request has
  // finished. Returns the engine's error if a step failed (in-flight requests then get
  // finish_reason "error").
  Status run();
  // Stops admitting (submit() returns Unavailable); requests in flight keep running for
  // up to `grace_seconds`, then are aborted ("abort"). Thread-safe, idempotent.
  void shutdown(double grace_seconds);

  StatusOr<uint64_t> submit(SeqRequest request, SeqSink sink) override;
  void cancel(uint64_t id) override;
  ServiceSnapshot snapshot() const override;
  // "failed" (detail: the error) once run() has failed; "stalled" while a step has run
  // longer than liveness_timeout_seconds; else "ok" (shutting down is the front end's).
  ServiceHealth health() const override;
  const ModelInfo& model_info() const override;
  int count_tokens(const std::string& text) const override;
  // Through the engine's tokenizer (const, thread-safe). detokenize: InvalidArgument
  // naming the first id outside [0, vocab_size).
  StatusOr<std::vector<int>> tokenize(const std::string& text, bool add_special_tokens) const override;
  StatusOr<std::string> detokenize(const std::vector<int>& ids) const override;
  std::string token_bytes(int id) const override;

  struct State;  // implementation detail (scheduler.cc)

 private:
  explicit Scheduler(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace moe
