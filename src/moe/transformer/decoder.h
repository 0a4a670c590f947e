// The decoder forward pass (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3): embedding ->
// L x [RMSNorm -> attention block -> residual -> RMSNorm -> feed-forward block ->
// residual] -> RMSNorm -> lm_head. The attention block is GQA with RoPE
// (gqa_attention.h) or multi-head latent attention (mla_attention.h); the
// feed-forward block is the sparse MoE (+ shared expert) on MoE layers and a dense
// SwiGLU MLP elsewhere (mlp_blocks.h). References:
// transformers/models/{mixtral,qwen2_moe,qwen3_moe}/modeling_*.py.
//
// Tensor parallelism (DecoderOptions::tp; Megatron-LM, Shoeybi et al. 2019): the
// decoder is built with tp_local_config() and shard_weights_for_tp() (model/tp_shard.h),
// so each block yields this rank's PARTIAL output, which is all-reduced over the TP
// group after attention and after each feed-forward block. The embedding and the
// lm_head are vocab-parallel (rows looked up where owned, zeros elsewhere, all-reduced;
// logits all-gathered). The driver (TP rank 0 of the driver group) broadcasts each
// forward's batch to its followers, which run the same forward via tp_follow().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/ops/kernel_options.h"
#include "moe/tensor/tensor.h"
#include "moe/transformer/attention_block.h"
#include "moe/transformer/feed_forward_block.h"
#include "moe/transformer/kv_cache.h"
#include "moe/transformer/mla_attention.h"
#include "moe/transformer/mlp_blocks.h"
#include "moe/transformer/paged_kv_cache.h"

namespace moe {

// Tensor parallelism of one decoder (all of it: not owned, null comm = no TP).
struct TpOptions {
  // The TP group (ranks of one node). Its rank 0 of the driver group drives.
  Communicator* comm = nullptr;
  // First vocabulary row of this rank's embed_tokens / lm_head shard
  // (vocab_shard(vocab, comm->rank(), comm->size()).begin).
  int64_t vocab_begin = 0;
  // This TP group holds the driver (world rank 0): its rank 0 broadcasts every forward's
  // batch, its other ranks call tp_follow(). Other TP groups (hybrid TP x EP, ep_rank >
  // 0) only ever call forward_chunk(nullptr, 0) to join the MoE exchanges.
  bool driver_group = false;
  // MoE layers run MoeBlock::forward_fused (RS -> A2A -> AG, MixServe) instead of
  // all-reduce + MoE + all-reduce; dense layers keep the all-reduce path.
  bool fused_moe = false;
};

// DP-attention (SGLang's and vLLM's data-parallel attention): one attention
// replica per TP group (per emulated node), each running attention, the embedding and
// the lm_head for its own share of a batch's sequences, with those sequences' KV caches;
// the MoE layers stay expert-parallel across the groups, each group sending its own
// tokens through the all-to-all. The driver (world rank 0) sends every forward's plan
// (which segment runs on which group) to the other groups' leaders, which run their
// share (broadcasting it to their TP followers as a TP driver) and send the logits back.
struct DpOptions {
  // The DP group: TP rank 0 of every TP group, its rank being the group's index (the EP
  // group of TP rank 0; the world without TP). Null on TP followers and when off. Under
  // DP every TP group is a "driver group" (TpOptions::driver_group) of its own share.
  Communicator* comm = nullptr;
};

// A TP follower's own KV caches, created or resized on demand with the LOCAL config's
// KV shape (the engine owns them). Each returns the cache to use, or null (the follow
// then fails with FailedPrecondition).
struct TpFollowerCaches {
  std::function<KVCache*(int64_t capacity)> contiguous;
  std::function<PagedKVCache*(int64_t block_size, int64_t num_blocks)> paged;
};

struct DecoderOptions {
  // With `ep` (not owned; one context per layer, entries of dense layers unused), MoE
  // layers run expert-parallel over their context's comm and placement. The contexts
  // may be changed between calls (live rebalancing), never during one.
  const std::vector<EpContext>* ep = nullptr;
  // How every kernel of the forward runs (EngineOptions::batch_invariant).
  KernelOptions kernel;
  // Multi-head latent attention models: naive, absorbed or by rule (mla_attention.h).
  MlaPath mla_path = MlaPath::kAuto;
  // Tensor parallelism (see TpOptions); default none.
  TpOptions tp{};
  // DP-attention (see DpOptions); default off.
  DpOptions dp{};
};

class Decoder {
 public:
  // `config` and `weights` must outlive the decoder. Workspaces are sized here for
  // forward() (chunks of kMaxChunk tokens, one sequence); forward_batch() needs
  // reserve() for its limits first.
  Decoder(const ModelConfig& config, const ModelWeights& weights, const DecoderOptions& options = {});
  ~Decoder();

  // Sizes the workspaces for forward_batch() calls of up to max_tokens tokens in up to
  // max_segments segments (allocates; call once at set-up, e.g. the scheduler's
  // max_num_batched_tokens and max_num_seqs). Only grows.
  void reserve(int64_t max_tokens, int64_t max_segments);

  // Runs m tokens at positions [start_pos, start_pos + m), appending their K/V to
  // `cache`, and writes the logits of the LAST token to logits [vocab].
  // Prompts are processed in chunks of at most kMaxChunk tokens (prefill); m == 1 is a
  // decode step. Token ids must be in [0, vocab) (checked by the engine). Under EP,
  // every rank must make the same sequence of forward_chunk calls (rank 0 drives,
  // the others call forward_chunk with m = 0; see Engine). Errors: communication.
  Status forward(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits);
  // One chunk of at most kMaxChunk tokens; m == 0 only joins the MoE exchanges.
  Status forward_chunk(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits);

  // One step of continuous batching: several sequences' tokens in one forward pass
  // (linear layers and the MoE layer over all of them, attention per sequence over the
  // paged cache). Segment i's tokens sit at positions [start_pos, start_pos + n) of its
  // sequence; its block table must cover [0, start_pos + n). Logits of a segment's last
  // token go to its `logits` [vocab] unless that is null, and the logits of every one of
  // its tokens to `all_logits` [n, vocab] unless that is null (prompt logprobs). Calls
  // the chunk hook once
  // with the total token count (under EP: one exchange per MoE layer). Errors:
  // communication; InvalidArgument (nothing run) when the tokens or segments exceed
  // reserve().
  struct BatchSegment {
    const int* tokens = nullptr;
    int64_t n = 0;
    int64_t start_pos = 0;
    const int32_t* block_table = nullptr;
    float* logits = nullptr;
    float* all_logits = nullptr;
    // Under DP-attention (DpOptions): the DP group whose attention replica runs this
    // segment and holds its KV cache, in [0, number of groups); the same for every step
    // of a sequence. Ignored without DP.
    int dp_group = 0;
  };
  Status forward_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache);

  // TP followers (TP ranks > 0 of the driver group): receives the driver's next
  // forward_chunk / forward_batch (its kind, cache geometry, segments and tokens) and
  // runs the same forward on `caches` (logits computed, joined and discarded). One call
  // per driver call. Errors: communication; FailedPrecondition when not a follower or a
  // cache callback gives null; InvalidArgument for a malformed broadcast.
  Status tp_follow(const TpFollowerCaches& caches);

  // DP-attention, the leaders of DP groups > 0 (DpOptions): receives the driver's next
  // forward_chunk / forward_batch plan, runs the segments assigned to this group on the
  // paged cache from `caches` (a contiguous forward runs on the driver's group alone:
  // this group joins the exchanges with no tokens) and sends their logits to the driver.
  // One call per driver call. Errors: communication; FailedPrecondition when not a DP
  // leader > 0 or the cache callback gives null; InvalidArgument for a malformed plan.
  Status dp_follow(const TpFollowerCaches& caches);
  // The number of DP groups (1 without DP-attention).
  int dp_groups() const { return dp_.comm != nullptr ? dp_.comm->size() : 1; }

  // Before each chunk (rank 0 under EP): called with the chunk's size.
  void set_chunk_hook(std::function<Status(int64_t m)> hook) { chunk_hook_ = std::move(hook); }
  // After each MoE layer of each chunk: the layer index and its global routing counts
  // (for load statistics); called on every rank, including ranks with m == 0.
  using RoutingHook = MoeBlock::RoutingHook;
  void set_routing_hook(RoutingHook hook) { moe_block_->set_routing_hook(std::move(hook)); }
  // Capacity policy of the single-process MoE layer (under EP: ep->options.capacity).
  void set_capacity(const CapacityOptions& capacity) { moe_block_->set_capacity(capacity); }
  const EpTimings& ep_timings() const { return moe_block_->ep_timings(); }
  // Per-step tracing (`--trace`): each forward (a step; on every rank, joins included)
  // records its span, each layer's attention and feed-forward spans, and the EP layers'
  // spans, bytes and expert counts (MoeBlock::set_trace). Not owned; null = off.
  void set_trace(TraceRecorder* trace) {
    trace_ = trace;
    moe_block_->set_trace(trace);
  }

  static constexpr int64_t kMaxChunk = 512;

 private:
  // The layers over m token rows made of segments, with either the contiguous cache
  // (one segment) or the paged one.
  Status forward_rows(const int* tokens, const AttentionBatch& batch, int64_t m);
  // forward_chunk / forward_batch after the driver's broadcast.
  Status run_chunk(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits);
  Status run_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache, int64_t m, int64_t num_logits);
  // The same without the step's trace span.
  Status run_chunk_rows(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits);
  Status run_batch_rows(const std::vector<BatchSegment>& segments, PagedKVCache* cache, int64_t m, int64_t num_logits);
  // m == 0: join the layers' exchanges (MoE; fused: the TP group's too).
  Status join_exchanges();
  // Embedding rows of `tokens` into x [m, hidden] (vocab-parallel under TP).
  Status embed(const int* tokens, int64_t m, const TensorView& x);
  // logits [rows, vocab] = lm_head(normed [rows, hidden]) (all-gathered under TP).
  Status lm_head(const TensorView& normed, float* logits);
  // Sum of `out` [m, hidden] over the TP group (no-op without TP).
  Status tp_reduce(const TensorView& out, int64_t m);
  bool tp_driver() const;
  // The driver's broadcast of one forward (contiguous: one segment, capacity; paged).
  Status broadcast_chunk(const int* tokens, int64_t m, int64_t start_pos, const KVCache* cache, bool want_logits);
  Status broadcast_batch(const std::vector<BatchSegment>& segments, const PagedKVCache* cache);
  Status broadcast_plan(std::vector<int64_t>* header, std::vector<int64_t>* body);
  // DP-attention (decoder_dp.cc): the driver's plan to the other groups, its own share,
  // and the other groups' logits copied into the segments' buffers.
  bool dp_driver() const { return dp_.comm != nullptr && dp_.comm->rank() == 0; }
  Status dp_announce_chunk();
  Status dp_drive_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache);
  // This rank's TP-driver forward of its share (broadcast to its TP followers, then run).
  Status run_own_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  const std::vector<EpContext>* ep_;
  TpOptions tp_;
  DpOptions dp_;
  KernelOptions kernel_;
  std::unique_ptr<AttentionBlock> attention_;
  std::unique_ptr<MoeBlock> moe_block_;
  std::unique_ptr<DenseMlpBlock> dense_block_;
  std::vector<FeedForwardBlock*> ffn_;  // [num_layers]: moe_block_ or dense_block_

  // Workspaces, sized by the constructor and reserve():
  int64_t max_tokens_ = 0, max_segments_ = 0;
  Tensor x_, h_, block_out_;  // [max_tokens, hidden]: residual stream, normed, a block's output
  Tensor last_;              // [max_segments, hidden] rows for the lm_head
  Tensor batch_logits_;      // [max_segments, vocab]
  std::vector<int> batch_tokens_;     // capacity max_tokens
  std::vector<RowSegment> segments_;  // capacity max_segments
  std::function<Status(int64_t)> chunk_hook_;
  TraceRecorder* trace_ = nullptr;
  // Starts a traced step of m tokens (returns its start time; 0 when tracing is off) and
  // ends it (records its span).
  double trace_step_begin();
  void trace_step_end(double t0, int64_t m);
  // Tensor parallelism: local logits padded to ceil(vocab / tp) columns, all of them
  // gathered; a follower's received batch and scratch logits. Grow only.
  std::vector<float> tp_local_logits_, tp_gathered_logits_;
  std::vector<int64_t> tp_header_, tp_body_;
  std::vector<int> tp_tokens_;
  std::vector<int32_t> tp_tables_;
  std::vector<float> tp_scratch_logits_;
  // DP-attention: the plan sent / received, a group's segments and their logits rows.
  std::vector<int64_t> dp_header_, dp_body_;
  std::vector<int> dp_tokens_;
  std::vector<int32_t> dp_tables_;
  std::vector<float> dp_logits_;
};

}  // namespace moe
