// What a front end (the HTTP server, src/moe/serve/) needs from the engine: submit a
// request, receive its tokens as events, cancel it, read counters for /metrics.
// Implemented by Scheduler (continuous batching, src/moe/scheduler.h); tests may
// implement it with a fake.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moe/generation_types.h"
#include "moe/status.h"

namespace moe {

struct SeqRequest {
  std::string prompt;                   // tokenized with BOS per tokenizer_config
  std::vector<int> prompt_token_ids{};  // used instead of `prompt` when non-empty
  int max_tokens = 16;                  // >= 1 new tokens at most
  SamplingParams sampling{};            // temperature 0 = greedy
  // Stop strings: generation ends at the first occurrence of any of them in the
  // output text, which is cut before it (finish_reason "stop"). At most 4, non-empty.
  std::vector<std::string> stop{};
  bool ignore_eos = false;              // keep generating past EOS (benchmarks)
  // Tokens that end generation like EOS (vLLM stop_token_ids; the token is kept in
  // token_ids but its text is not output). Ids in the vocabulary.
  std::vector<int> stop_token_ids{};
  // Log-probabilities (vLLM / OpenAI): -1 = off; k >= 0 = each generated token's
  // logprob plus its k most likely alternatives (SeqEvent::logprobs). k <= 20.
  int logprobs = -1;
  // Same for the prompt's tokens (echo with logprobs): -1 = off; the first prompt token
  // has no logprob (OpenAI gives null). Sent in the first event's prompt_logprobs.
  int prompt_logprobs = -1;
  // Constrained decoding (OpenAI response_format): "text" (none), "json_object" (any
  // JSON object), or "json_schema" with `json_schema` the schema's JSON text. The
  // output is valid JSON by construction (a grammar masks the logits each step), and
  // generation stops at the end of the value. InvalidArgument (naming
  // response_format) for a schema it cannot compile.
  std::string response_format = "text";
  std::string json_schema{};
  // A replay after a failure (the supervisor, src/moe/supervisor/): the tokens this
  // request had already generated and delivered. They are prefilled after the prompt as
  // if generated: they count toward max_tokens and completion_tokens, are not sent again
  // in events (nor is their text), stop strings and EOS see them as output, and the
  // sampler continues as if uninterrupted (its random stream advanced past them), so a
  // greedy or seeded request gives the tokens of an uninterrupted run.
  // InvalidArgument if there are max_tokens or more of them, one is out of the vocab, or
  // they could not have been generated: an EOS among them (unless ignore_eos) or their
  // text completing a stop string (either would have ended the request).
  std::vector<int> resume_token_ids{};
  // Prefix caching (vLLM's cache_salt): requests share cached prefix KV only when their
  // salts are equal, so a tenant's prompts cannot be probed by another's timing. The
  // server derives part of it from the API key (docs/serving.md, "Prefix caching").
  std::string cache_salt{};
};

// One step's news for one request. Events of a request arrive in order, the last one
// with finished = true (and no event after it).
struct SeqEvent {
  std::string text;             // text added since the previous event (may be empty)
  std::vector<int> token_ids;   // tokens added since the previous event
  // With SeqRequest::logprobs >= 0: one entry per token in token_ids, in order.
  std::vector<TokenLogprob> logprobs{};
  // With SeqRequest::prompt_logprobs >= 0, in the first event only: one entry per
  // prompt token (the first one's logprob is 0 and its top empty: nothing predicts it).
  std::vector<TokenLogprob> prompt_logprobs{};
  bool finished = false;
  // When finished: "stop" (EOS or a stop string), "length" (max_tokens), "abort"
  // (cancelled, or the server shut down), "error" (engine failure; see `error`).
  std::string finish_reason;
  std::string error;
  int prompt_tokens = 0;        // always set
  int completion_tokens = 0;    // tokens generated so far
  // Prompt tokens whose KV came from the prefix cache, not computed (OpenAI's
  // usage.prompt_tokens_details.cached_tokens); set in every event.
  int cached_tokens = 0;
  // When finished, the request's engine timings in seconds (vLLM's per-request metrics;
  // 0 for a phase it never reached): queued (submit -> admitted to the running batch),
  // prefill (admitted -> first token generated), decode (first -> last token generated).
  // Inference time = prefill + decode.
  double queue_seconds = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Called on the scheduler thread. Must return quickly and never block on the client
// (queue the event and return).
using SeqSink = std::function<void(SeqEvent&& event)>;

// Bucket upper bounds (tokens) of ServiceSnapshot::iteration_tokens (vLLM's
// vllm:iteration_tokens_total buckets).
inline constexpr int kIterationTokenBounds[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

// Counters for GET /metrics; a consistent copy taken between steps.
struct ServiceSnapshot {
  int running = 0;                  // sequences in the running batch
  int waiting = 0;                  // admitted to the queue, not yet running (no KV room or seq slot)
  int64_t kv_blocks_total = 0;      // KV-cache blocks in the pool
  int64_t kv_blocks_used = 0;
  int kv_block_size = 0;            // tokens per block
  int64_t steps = 0;                // engine steps run
  int64_t prompt_tokens_total = 0;  // prompt tokens prefilled (all requests)
  int64_t generation_tokens_total = 0;
  int64_t requests_finished = 0;    // by any finish reason
  // Tokens per engine step (prompt chunks + decodes): steps whose count is <= each bound
  // of kIterationTokenBounds and above the previous one, then the steps above the last
  // bound (not cumulative; empty = no step yet); and the tokens of all steps.
  std::vector<int64_t> iteration_tokens{};
  int64_t iteration_tokens_sum = 0;
  // Sequences preempted (vLLM's num_preemptions): a running sequence gives its KV blocks
  // back when a decode finds none free, and is recomputed later (its cached prefix blocks
  // stay cached).
  int64_t preemptions = 0;
  // Automatic prefix caching (vLLM's prefix_cache_queries / _hits): prompt tokens looked
  // up at admission, and those found cached (in memory or on the disk tier).
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  // The disk tier of cached KV blocks (--kv-offload-dir; all 0 without it): blocks
  // loaded back and their bytes, blocks written and their bytes, block files refused
  // (corrupt, truncated, another model or layout) and writes that failed (full disk) or
  // were dropped (the writer's queue was full).
  int64_t kv_disk_hits = 0;
  int64_t kv_disk_hit_bytes = 0;
  int64_t kv_disk_writes = 0;
  int64_t kv_disk_write_bytes = 0;
  int64_t kv_disk_rejects = 0;
  int64_t kv_disk_write_failures = 0;
  // Routed tokens (assignments after the capacity policy) per MoE layer and expert
  // since start-up, global over the EP group: expert_tokens[i][e] for layer moe_layers[i].
  std::vector<int> moe_layers;
  std::vector<std::vector<int64_t>> expert_tokens;
  // Fault tolerance (the supervisor, src/moe/supervisor/; zero for a plain Scheduler):
  int64_t worker_failures = 0;        // times the worker group was declared failed
  int64_t recoveries = 0;             // times a relaunched group took over
  int64_t replayed_requests = 0;      // requests resubmitted to a relaunched group
  std::vector<double> recovery_seconds{};  // each recovery: failure detected -> serving again
  // Expert-level failover inside the worker group (no restart; docs/reliability.md):
  int64_t failovers = 0;        // times the EP group re-formed without failed ranks
  int64_t ranks_lost = 0;       // ranks left out by those re-formations
  int64_t lost_experts = 0;     // (layer, expert) pairs with no live replica now (tokens rerouted)
  int64_t degraded_tokens = 0;  // token routings (summed over MoE layers) sent to a next-best expert: one they chose was lost
  std::vector<double> failover_seconds{};  // each failover: recover() called -> survivors' placement adopted
  // Adaptive top-k and adaptive_requeue (src/moe/moe/capacity.h), summed over MoE layers
  // since start-up: token routings that shed at least one expert under load, the
  // assignments shed, and overflowing assignments run in the second round.
  int64_t adaptive_k_tokens = 0;
  int64_t adaptive_k_shed = 0;
  int64_t requeued = 0;
  // Expert parallelism's exchanges on this rank (rank 0) since start-up (zero without EP):
  // time blocked on them, their time from issue to completion, and the fraction hidden
  // behind compute, 1 - wait / exchange in [0, 1] (/metrics' moe:comm_overlap_ratio).
  double ep_comm_wait_seconds = 0;
  double ep_exchange_seconds = 0;
  double comm_overlap_ratio = 0;
  // Per-link traffic of the expert-parallel all-to-all (dispatch + combine rows) since
  // start-up, as rank 0 (the serving rank, EP rank 0) sees it: link_bytes_sent[d] bytes
  // it sent to EP rank d, link_bytes_received[s] bytes it received from EP rank s
  // (index 0: rows it kept). Links between two other ranks are in --trace files only.
  // Empty without EP or before the first exchange.
  std::vector<int64_t> link_bytes_sent{}, link_bytes_received{};
};

// GET /health's answer: what state serving is in. Thread-safe and never blocks on a
// running step.
struct ServiceHealth {
  // "ok"         serving;
  // "recovering" the worker group failed and is being relaunched: requests are accepted
  //              and kept, and resume when it is back (HTTP 503 so a load balancer
  //              routes elsewhere meanwhile);
  // "degraded"   serving (HTTP 200), but some expert lost with a failed rank has no live
  //              replica yet: its tokens go to their next-best live expert until it is
  //              re-replicated;
  // "stalled"    a step has run longer than the liveness timeout (a stuck peer);
  // "failed"     the engine failed and will not serve again (the process is exiting).
  std::string state = "ok";
  std::string detail{};  // why, when not ok (e.g. "step running for 12.5 s")
  // Under the supervisor (src/moe/supervisor/): the pid of each rank (index = rank; -1
  // where unknown) of the worker group serving now; empty otherwise (and while none is).
  // For operators and the fault-injection harness (GET /health shows it).
  std::vector<int64_t> worker_pids{};
  bool ok() const { return state == "ok"; }
  // Serving requests now (ok or degraded): HTTP 200.
  bool serving() const { return state == "ok" || state == "degraded"; }
};

class GenerationService {
 public:
  virtual ~GenerationService() = default;
  // Validates and queues a request; its events go to `sink` (never called before
  // submit returns the id). Thread-safe. Errors (nothing queued, sink never called):
  //   InvalidArgument    - empty prompt, bad sampling values, max_tokens < 1, too many
  //                        stop strings, or prompt + max_tokens longer than the context
  //                        or than the whole KV cache (can never fit): an HTTP 400;
  //   Unavailable        - shutting down: an HTTP 503.
  virtual StatusOr<uint64_t> submit(SeqRequest request, SeqSink sink) = 0;
  // Cancels a request (client disconnected): it leaves the batch at the next step
  // boundary, its KV blocks are freed, and its sink gets a final "abort" event. Unknown
  // or finished ids are ignored. Thread-safe.
  virtual void cancel(uint64_t id) = 0;
  virtual ServiceSnapshot snapshot() const = 0;  // thread-safe
  // Thread-safe, non-blocking. Default: always "ok" (a fake with no failure modes).
  virtual ServiceHealth health() const { return {}; }
  virtual const ModelInfo& model_info() const = 0;
  // Token count of `text` as submit() would tokenize it (BOS included). Thread-safe.
  virtual int count_tokens(const std::string& text) const = 0;
  // The tokenizer, for /tokenize, /detokenize and logprobs' token strings. Thread-safe.
  // Default implementations (a fake service): Unimplemented / empty.
  // `add_special_tokens` false: no BOS/EOS added.
  virtual StatusOr<std::vector<int>> tokenize(const std::string& text, bool add_special_tokens) const {
    (void)text; (void)add_special_tokens;
    return unimplemented("tokenize is not supported by this service");
  }
  // Special tokens dropped, as the output text is. InvalidArgument for an id outside
  // the vocabulary.
  virtual StatusOr<std::string> detokenize(const std::vector<int>& ids) const {
    (void)ids;
    return unimplemented("detokenize is not supported by this service");
  }
  // The bytes token `id` stands for in text (may be a partial UTF-8 character), e.g.
  // for logprobs' "token" strings; empty for special tokens and out-of-range ids.
  virtual std::string token_bytes(int id) const { (void)id; return {}; }
  // Forgets every cached prefix in memory (vLLM's POST /reset_prefix_cache): later
  // requests recompute their prompts until the cache refills. Thread-safe; takes effect
  // before the next step. Default (a service without a cache): Unimplemented.
  virtual Status reset_prefix_cache() { return unimplemented("this service has no prefix cache"); }
};

}  // namespace moe
