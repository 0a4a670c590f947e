// Continuous batching (Orca, Yu et al. OSDI'22; vLLM's scheduler, Kwon et al. SOSP'23):
// requests join and leave the running batch at step boundaries; each step runs one
// forward pass over the decode tokens of every running sequence plus prompt chunks
// (chunked prefill) up to a token budget. The KV cache is a pool of fixed-size blocks
// (src/moe/transformer/paged_kv_cache.h) whose bookkeeping is src/moe/kv/block_manager.h:
// a request is admitted when blocks for its prompt are free (first come, first served),
// and its blocks grow as it decodes. When a decode finds no free block, the newest
// running sequence is preempted (vLLM V1's recompute): its blocks go back, its full ones
// stay in the prefix cache, and it resumes first, prefilling what it had, with no token
// of its stream repeated or lost. Automatic prefix caching (on by default) starts a
// prompt's prefill after its longest cached prefix.
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
  // Pool size in tokens; 0 = from kv_cache_memory_bytes, else sized by memory: at most
  // max_num_seqs * context, within memory_utilization of the memory this process may use
  // (core/memory_limit.h: MemTotal or the cgroup limit) less the weights.
  int64_t kv_cache_tokens = 0;
  // Pool size in bytes (vLLM's --kv-cache-memory-bytes); 0 = by kv_cache_tokens or memory.
  uint64_t kv_cache_memory_bytes = 0;
  // Fraction of the process's memory limit that the weights and the pool may use
  // together, in (0, 1]. A pool (given or derived) that does not fit beside the weights
  // is refused by create(), naming the numbers, rather than OOM-killed later.
  double memory_utilization = 0.9;
  // Automatic prefix caching (vLLM's --enable-prefix-caching, on by default).
  bool enable_prefix_caching = true;
  // Reserve prompt + max_tokens at admission instead of growing on demand: no request is
  // ever preempted, at the cost of holding the worst case (the former policy; a
  // baseline for benchmarks).
  bool reserve_max_tokens = false;
  // The disk tier of cached prefix blocks (vLLM-style "KV offload"): with a directory,
  // every full block that enters the prefix cache is also written (in the background) to
  // DIR/<block key>.kvb, bounded by kv_offload_bytes (least recently used files go
  // first), and a prefix missing from memory is looked up there; the files survive a
  // restart. Block files that fail verification (corrupt, truncated, another model or
  // KV layout) are never used: they are counted, and the KV recomputed. Needs prefix
  // caching; refused under TP and DP-attention (a block's KV is split over ranks there).
  // An unwritable directory logs a warning and serves without the tier.
  std::string kv_offload_dir{};
  uint64_t kv_offload_bytes = uint64_t{4} << 30;
  // Tests: keeps only this many low bits of each prefix block key (0 = all 128), so keys
  // collide and the token-id check must catch it. In [0, 64].
  int prefix_hash_bits_for_test = 0;
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
  Status reset_prefix_cache() override;

  struct State;  // implementation detail (scheduler.cc)

 private:
  explicit Scheduler(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace moe
