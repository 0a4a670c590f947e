// Grouped-query attention (Ainslie et al. 2023) as Mixtral, Qwen2-MoE and Qwen3-MoE run
// it: q/k/v projections (+ q/k/v bias: Qwen2-MoE), per-head q/k RMSNorm before RoPE
// (Qwen3-MoE), RoPE (honouring rope_scaling linear/yarn and rope_interleave:
// rope_config.h), the KV-cache write, causal attention over the cache, o_proj.
// References: transformers/models/{mixtral,qwen2_moe,qwen3_moe}/modeling_*.py.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/ops/kernel_options.h"
#include "moe/ops/paged_attention.h"
#include "moe/ops/rope.h"
#include "moe/tensor/tensor.h"
#include "moe/transformer/attention_block.h"

namespace moe {

class GqaAttention final : public AttentionBlock {
 public:
  // `config` and `weights` must outlive the block. Workspaces: see reserve().
  GqaAttention(const ModelConfig& config, const ModelWeights& weights, const KernelOptions& kernel);

  // q/attn [max_tokens, num_heads * head_dim], k/v [max_tokens, num_kv_heads * head_dim]
  // f32, and the per-sequence descriptors of the paged kernel.
  void reserve(int64_t max_tokens, int64_t max_segments) override;
  void forward(int layer, const TensorView& x, const AttentionBatch& batch, const TensorView& out) override;

 private:
  const ModelConfig& config_;
  const ModelWeights& weights_;
  KernelOptions kernel_;
  RopeTable rope_;
  int64_t max_tokens_ = 0;
  Tensor q_, k_, v_, attn_;  // [max_tokens, q_dim] / [max_tokens, kv_dim] x 2 / [max_tokens, q_dim]
  std::vector<PagedAttentionSeq> paged_seqs_;  // capacity: max_segments
};

}  // namespace moe
