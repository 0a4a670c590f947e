// The decoder forward pass (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3): embedding ->
// L x [RMSNorm -> attention block -> residual -> RMSNorm -> feed-forward block ->
// residual] -> RMSNorm -> lm_head. The attention block is GQA with RoPE
// (gqa_attention.h) or multi-head latent attention (mla_attention.h); the
// feed-forward block is the sparse MoE (+ shared expert) on MoE layers and a dense
// SwiGLU MLP elsewhere (mlp_blocks.h). References:
// transformers/models/{mixtral,qwen2_moe,qwen3_moe}/modeling_*.py.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

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

struct DecoderOptions {
  // With `ep` (not owned; one context per layer, entries of dense layers unused), MoE
  // layers run expert-parallel over their context's comm and placement. The contexts
  // may be changed between calls (live rebalancing), never during one.
  const std::vector<EpContext>* ep = nullptr;
  // How every kernel of the forward runs (EngineOptions::batch_invariant).
  KernelOptions kernel;
  // Multi-head latent attention models: naive, absorbed or by rule (mla_attention.h).
  MlaPath mla_path = MlaPath::kAuto;
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
  };
  Status forward_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache);

  // Before each chunk (rank 0 under EP): called with the chunk's size.
  void set_chunk_hook(std::function<Status(int64_t m)> hook) { chunk_hook_ = std::move(hook); }
  // After each MoE layer of each chunk: the layer index and its global routing counts
  // (for load statistics); called on every rank, including ranks with m == 0.
  using RoutingHook = MoeBlock::RoutingHook;
  void set_routing_hook(RoutingHook hook) { moe_block_->set_routing_hook(std::move(hook)); }
  // Capacity policy of the single-process MoE layer (under EP: ep->options.capacity).
  void set_capacity(const CapacityOptions& capacity) { moe_block_->set_capacity(capacity); }
  const EpTimings& ep_timings() const { return moe_block_->ep_timings(); }

  static constexpr int64_t kMaxChunk = 512;

 private:
  // The layers over m token rows made of segments, with either the contiguous cache
  // (one segment) or the paged one.
  Status forward_rows(const int* tokens, const AttentionBatch& batch, int64_t m);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  const std::vector<EpContext>* ep_;
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
};

}  // namespace moe
