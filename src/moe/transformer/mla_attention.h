// Multi-head latent attention (MLA) as DeepSeek-V2/V3 and Kimi-K2 run it (DeepSeek-V2
// paper, arXiv:2405.04434, section 2.1; transformers modeling_deepseek_v3.py):
//   q   = q_b_proj(RMSNorm(q_a_proj(x)))  (or q_proj(x) when q_lora_rank is 0),
//         per head [q_nope | q_rope]
//   kv  = kv_a_proj_with_mqa(x) = [c_kv | k_rope];  c = RMSNorm(c_kv)
//   per head: k = [W_UK c | k_rope], v = W_UV c   (kv_b_proj = per head [W_UK; W_UV])
//   RoPE on q_rope and k_rope only (k_rope: one head shared by all heads); causal
//   softmax with scale qk_head_dim^-0.5 (times YaRN's mscale^2); output o_proj.
// The KV cache holds the latent row [c | k_rope] per position and layer
// (kv_lora_rank + qk_rope_head_dim floats), not per-head keys and values.
//
// Two ways to attend, equal up to rounding (tests/transformer/mla_attention_test.cc):
//   naive:    expand K and V of every cached position from the latent, then attend per
//             head (what a prefill wants: no absorption work per query);
//   absorbed: fold W_UK into the query (q_nope W_UK, kv_lora_rank wide) and W_UV into
//             the output, and attend in the latent space: one shared key/value row per
//             position (paper section 2.1.3; what a decode wants: nothing per cached
//             position but the dot products).
#pragma once

#include <cstdint>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/ops/kernel_options.h"
#include "moe/ops/linear.h"
#include "moe/ops/mla_attention.h"
#include "moe/ops/rope.h"
#include "moe/tensor/tensor.h"
#include "moe/transformer/attention_block.h"

namespace moe {

// Which form attends. kAuto: per segment, whichever does fewer multiply-adds
// (mla_prefers_naive; docs/performance.md): naive for a fresh prompt, absorbed for decode
// and for short chunks appended to a long context -- except under batch-invariant
// kernels, where every segment takes the absorbed path so that a token's result does
// not depend on how its prompt was chunked.
enum class MlaPath { kAuto, kNaive, kAbsorbed };

// True when n query rows at positions [start_pos, start_pos + n) cost fewer multiply-adds
// naive than absorbed: with E = heads * (qk_nope + v_head) * kv_lora_rank (expanding one
// cached position = absorbing one query), Dn = heads * (qk_head + v_head) and
// Da = heads * (2 * kv_lora_rank + qk_rope) (per (query, key) pair) and
// P = n * start_pos + n (n + 1) / 2 pairs, naive costs (start_pos + n) E + P Dn and
// absorbed n E + P Da, so naive wins iff start_pos * E < P * (Da - Dn).
bool mla_prefers_naive(const ModelConfig& config, int64_t start_pos, int64_t n);

class MlaAttention final : public AttentionBlock {
 public:
  // `config` (config.mla.enabled()) and `weights` must outlive the block. Builds the
  // absorbed path's W_UK^T per layer (f32, heads * kv_lora_rank * qk_nope_head_dim
  // floats per layer). Workspaces: see reserve().
  MlaAttention(const ModelConfig& config, const ModelWeights& weights, const KernelOptions& kernel, MlaPath path);

  void reserve(int64_t max_tokens, int64_t max_segments) override;
  // The batch's cache (contiguous or paged) must be a latent cache: one row of
  // kv_lora_rank + qk_rope_head_dim floats per position, no V (kv_cache.h).
  void forward(int layer, const TensorView& x, const AttentionBatch& batch, const TensorView& out) override;

  // qk_head_dim^-0.5, times get_mscale(factor, mscale_all_dim)^2 under YaRN.
  static float softmax_scale(const ModelConfig& config);

 private:
  void project_queries(const LayerWeights& L, const float* x, int64_t m);
  void write_cache(int layer, const AttentionBatch& batch);
  void attend_absorbed(int layer, const AttentionBatch& batch, const RowSegment* segs, size_t n);
  void attend_naive(int layer, const AttentionBatch& batch, const RowSegment& seg);
  LatentRows latent_rows(int layer, const AttentionBatch& batch) const;

  const ModelConfig& config_;
  const ModelWeights& weights_;
  KernelOptions kernel_;
  MlaPath path_;
  RopeTable rope_;
  float scale_;
  int heads_, nope_, rope_dim_, v_dim_, lora_, qk_;
  std::vector<Tensor> wuk_t_;  // [layer]: [heads * kv_lora, qk_nope] f32, head h rows [h*kv_lora, (h+1)*kv_lora)
  int64_t max_tokens_ = 0;
  Tensor q_a_;     // [max_tokens, q_lora_rank]
  Tensor q_;       // [max_tokens, heads * qk_head_dim]: [q_nope | q_rope] per head
  Tensor kv_;      // [max_tokens, kv_lora + rope]: the latent rows written to the cache
  Tensor q_abs_;   // [max_tokens, heads * (kv_lora + rope)]: [q_nope W_UK | q_rope] per head
  Tensor o_lat_;   // [max_tokens, heads * kv_lora]: latent attention output
  Tensor attn_;    // [max_tokens, heads * v_head_dim]
  Tensor gather_;  // [heads, max_tokens, max(kv_lora, qk_nope)] per-head inputs of the absorbed projections
  Tensor scatter_; // [heads, max_tokens, max(kv_lora, v_head_dim)] their outputs
  std::vector<float> ctx_lat_, ctx_kv_, ctx_k_, ctx_v_;  // naive path, grown with the context
  std::vector<MlaSeq> seqs_;
  // [layer][head]: W_UK^T (views into wuk_t_) and W_UV (row blocks of kv_b_proj, with
  // their FP8 scales), the absorbed path's per-head projections; built once.
  std::vector<std::vector<Weight2D>> wuk_heads_, wuv_heads_;
  std::vector<LinearJob> jobs_;         // [heads], reused per call
  std::vector<RowSegment> absorbed_;    // the step's absorbed segments (capacity max_segments)
};

}  // namespace moe
