// The Scheduler's private state (include/moe/scheduler.h), shared by scheduler.cc (the
// step, events, the GenerationService methods) and scheduler_kv.cc (the KV policy:
// admission, preemption, the pool's size, the disk tier). Internal to src/moe/engine;
// the scheduler thread owns everything but what is marked as shared under `mu` / `snap_mu`.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "moe/constrain/json_constraint.h"
#include "moe/engine/engine_core.h"
#include "moe/engine/json_decoding.h"
#include "moe/engine/logits_processor.h"
#include "moe/kv/block_manager.h"
#include "moe/kv/disk_tier.h"
#include "moe/scheduler.h"
#include "moe/transformer/paged_kv_cache.h"

namespace moe {
namespace scheduler_detail {

struct Seq {
  uint64_t id = 0;
  SeqRequest req;
  SeqSink sink;
  std::vector<int> tokens;  // prompt + output
  int64_t prompt_len = 0;
  int64_t prefill_len = 0;  // prompt + resumed tokens (SeqRequest.resume_token_ids): prefilled, then decodes
  int64_t cached = 0;       // tokens whose K/V are in the cache
  bool done = false;        // finished: leaves the running batch after this step
  bool preempt = false;     // gives its blocks back this step, then waits (recompute)
  int64_t admitted = 0;     // admission order (the newest running sequence is preempted first)
  int cached_prompt = 0;    // prompt tokens served from the prefix cache at first admission
  int dp_group = 0;  // DP-attention: the group whose attention replica holds its KV (set at admission)
  std::unique_ptr<RequestSampler> sampler;    // logit_bias, penalties, sampling, logprobs
  std::vector<TokenLogprob> logprobs;         // of the output tokens not sent yet (req.logprobs >= 0)
  std::vector<TokenLogprob> prompt_logprobs;  // built while prefilling (req.prompt_logprobs >= 0)
  bool prompt_logprobs_sent = false;
  std::vector<float> chunk_logits;            // [chunk, vocab]: every row of a prompt chunk, for prompt_logprobs
  std::unique_ptr<JsonConstraint> json;  // response_format json_object / json_schema (else null)
  std::vector<float> raw_logits;         // json with logprobs: the logits before the grammar's mask
  // Incremental detokenization (as Hugging Face TGI / vLLM do): `text` is the
  // continuation so far; tokens [prefix_offset, read_offset) are the already-decoded
  // context whose decoded text is cut off the decode of [prefix_offset, end), so a
  // first word keeps its leading space and each step decodes a few tokens, not the
  // whole sequence.
  std::string text;
  size_t prefix_offset = 0, read_offset = 0;
  size_t emitted = 0;       // bytes of the continuation sent
  size_t tokens_sent = 0;   // output tokens sent
  std::vector<float> logits;
  // now_seconds() at submit, admission, the first and the latest token generated (0 = not yet).
  double submitted_at = 0, scheduled_at = 0, first_token_at = 0, last_token_at = 0;
};

// SchedulerOptions::prefix_hash_bits_for_test: XXH3-128 cut to its low `bits` bits.
inline std::function<KvBlockHash(const KvBlockHash&, std::span<const int32_t>)> truncated_hash(int bits) {
  if (bits <= 0) return nullptr;
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  return [mask](const KvBlockHash& parent, std::span<const int32_t> tokens) {
    KvBlockHash h = kv_block_hash(parent, tokens);
    return KvBlockHash{0, h.low & mask};
  };
}

// The pool's size in blocks (SchedulerOptions: kv_cache_tokens, kv_cache_memory_bytes,
// else max_num_seqs * context within memory_utilization of memory_limit(), less the
// weights). InvalidArgument for a pool under one block; FailedPrecondition, naming the
// sizes and the limit's source, when it does not fit beside the weights.
StatusOr<int64_t> kv_pool_blocks(const SchedulerOptions& o, const EngineCore& core, size_t bytes_per_token);

}  // namespace scheduler_detail

using scheduler_detail::Seq;

struct Scheduler::State {
  EngineCore* core = nullptr;  // the engine's decoder, tokenizer, config, stats, EP session
  SchedulerOptions options;
  std::unique_ptr<PagedKVCache> kv;
  // One block manager per attention group (DP-attention: each group's pool is its own;
  // one without DP). A sequence's block table lives in its group's manager.
  std::vector<std::unique_ptr<KvBlockManager>> kvm;
  std::unique_ptr<KvDiskTier> disk;  // --kv-offload-dir (else null)
  std::vector<uint8_t> block_buf;    // one block's bytes, for the disk tier
  int64_t admissions = 0;
  int64_t preemptions = 0;
  std::atomic<bool> reset_requested{false};  // POST /reset_prefix_cache, applied between steps
  ConstraintVocabCache constraint_vocab;  // built at the first constrained request

  // Shared with submitting threads, under mu.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Seq>> incoming;
  std::unordered_set<uint64_t> cancelled;
  uint64_t next_id = 1;
  bool shutting_down = false;
  std::string refusal;  // why submit() refuses once the engine has failed (guarded by mu)
  double shutdown_deadline = 0;

  // The scheduler thread's own.
  std::deque<std::unique_ptr<Seq>> waiting;
  std::vector<std::unique_ptr<Seq>> running;

  mutable std::mutex snap_mu;
  ServiceSnapshot snap;
  // For health(): when the running step began (now_seconds(); 0 = none running), and
  // the error that ended run() (under snap_mu).
  std::atomic<double> step_started{0};
  std::string failure;

  // Final event (text cut at `cut` bytes of the continuation, for stop strings), frees
  // the blocks; the caller drops the sequence.
  void finish(Seq& s, const std::string& reason, const std::string& error = {}, size_t cut = std::string::npos);
  void emit(Seq& s, bool finished, const std::string& reason, size_t cut = std::string::npos);
  // Bytes of s.text an event may carry by now (stop-string prefixes held back while running).
  size_t sendable(const Seq& s, bool finished, size_t cut) const;
  void detokenize(Seq& s, bool flush);
  // A resumed request: appends its resumed tokens as the uninterrupted run generated
  // them, leaving the detokenizer and s.emitted where that run's events had left them.
  Status prime_resumed(Seq& s);
  Status step();
  // DP-attention: the group with the fewest running sequences (the lowest on a tie).
  int least_loaded_dp_group() const;
  // The block table of a running sequence (its group's manager).
  const std::vector<int32_t>& table(const Seq& s) const { return kvm[static_cast<size_t>(s.dp_group)]->table(s.id); }
  KvBlockManager& manager(const Seq& s) { return *kvm[static_cast<size_t>(s.dp_group)]; }
  // The root of a sequence's prefix keys: what computes its KV (the engine's key), the
  // attention group whose pool holds it, and its salt.
  KvBlockHash prefix_root(const Seq& s, int group) const {
    return kv_root_hash(core->kv_cache_key + "\ngroup=" + std::to_string(group) + "\nsalt=" + s.req.cache_salt);
  }
  // Admits the head of `waiting` if its blocks are free; false (it stays) if not.
  bool admit(Seq& s);
  // Takes blocks for this step's decodes; preempts the newest running sequences of a
  // group while one of its decodes finds none free.
  void grow_or_preempt();
  void preempt(Seq& s);
  // Opens the disk tier and hooks it to the block manager (a failure: a warning, no tier).
  void open_disk_tier(const KvCacheShape& shape);
  void publish();
  // publish() with snap_mu held (a step's counters and its EP bytes change in one update,
  // so no scrape sees one without the other).
  void publish_locked();
  // Copies the EP session's failover counters and the lost experts into the snapshot.
  void record_failover();
};

}  // namespace moe
