// The decoder forward pass (Mixtral, Qwen2-MoE, Qwen3-MoE): embedding -> L x [RMSNorm
// -> GQA attention with RoPE (q/k/v bias: Qwen2-MoE; per-head q/k RMSNorm before RoPE:
// Qwen3-MoE) -> residual -> RMSNorm -> MLP block -> residual] -> RMSNorm -> lm_head.
// The MLP block is the sparse MoE (+ shared expert) on MoE layers and a dense SwiGLU
// MLP elsewhere. References: transformers/models/{mixtral,qwen2_moe,qwen3_moe}/modeling_*.py.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "moe/transformer/kv_cache.h"
#include "moe/transformer/paged_kv_cache.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/moe_layer.h"
#include "moe/moe/swiglu_mlp.h"
#include "moe/ops/paged_attention.h"
#include "moe/ops/rope.h"

namespace moe {

class Decoder {
 public:
  // `config` and `weights` must outlive the decoder. With `ep` (not owned; one context
  // per layer, entries of dense layers unused), MoE layers run expert-parallel over
  // their context's comm and placement. The contexts may be changed between calls
  // (live rebalancing), never during one.
  Decoder(const ModelConfig& config, const ModelWeights& weights, const std::vector<EpContext>* ep = nullptr);

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
  // token go to its `logits` [vocab] unless that is null. Calls the chunk hook once
  // with the total token count (under EP: one exchange per MoE layer). Errors:
  // communication.
  struct BatchSegment {
    const int* tokens = nullptr;
    int64_t n = 0;
    int64_t start_pos = 0;
    const int32_t* block_table = nullptr;
    float* logits = nullptr;
  };
  Status forward_batch(const std::vector<BatchSegment>& segments, PagedKVCache* cache);

  // Before each chunk (rank 0 under EP): called with the chunk's size.
  void set_chunk_hook(std::function<Status(int64_t m)> hook) { chunk_hook_ = std::move(hook); }
  // After each MoE layer of each chunk: the layer index and its global routing counts
  // (for load statistics); called on every rank, including ranks with m == 0.
  using RoutingHook = std::function<void(int layer, const StepRoutingCounts& counts)>;
  void set_routing_hook(RoutingHook hook) { routing_hook_ = std::move(hook); }
  // Capacity policy of the single-process MoE layer (under EP: ep->options.capacity).
  void set_capacity(const CapacityOptions& capacity) { capacity_ = capacity; }
  const EpTimings& ep_timings() const { return ep_timings_; }

  static constexpr int64_t kMaxChunk = 512;

 private:
  // The layers over m token rows made of segments (rows [row0, row0 + n) of a
  // segment), with either the contiguous cache (one segment) or the paged one.
  struct Rows {
    int64_t row0, n, start_pos;
    const int32_t* block_table;
  };
  Status forward_rows(const int* tokens, int64_t m, const std::vector<Rows>& segs, KVCache* cache,
                      PagedKVCache* paged);
  std::vector<Rows> rows_;
  std::vector<float> last_;           // [segments, hidden] rows for the lm_head
  std::vector<float> batch_logits_;   // [segments, vocab]
  std::vector<int> batch_tokens_;
  std::vector<PagedAttentionSeq> paged_seqs_;
  const ModelConfig& config_;
  const ModelWeights& weights_;
  RopeTable rope_;
  // Workspaces, grown on demand: [m, hidden] / [m, q_dim] / [m, kv_dim].
  std::vector<float> x_, h_, q_, k_, v_, attn_, moe_out_;
  MoeWorkspace moe_ws_;
  MlpWorkspace mlp_ws_;
  CapacityOptions capacity_;
  RoutingHook routing_hook_;
  const std::vector<EpContext>* ep_ = nullptr;
  EpWorkspacePtr ep_ws_;
  EpTimings ep_timings_;
  std::function<Status(int64_t)> chunk_hook_;
};

}  // namespace moe
