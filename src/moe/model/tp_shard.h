// Tensor parallelism (TP) of the model's weights: which part of every tensor a rank of
// a TP group of `tp` ranks holds (Megatron-LM's column/row-parallel split, Shoeybi et
// al. 2019, section 3; vLLM's ColumnParallelLinear / RowParallelLinear /
// VocabParallelEmbedding):
//   column-parallel (output rows split, a view): q/k/v_proj (+ bias), MLA q_b_proj /
//     q_proj and kv_b_proj (whole heads), w1/w3 (gate/up) of the dense MLP, of every
//     routed expert and of the shared expert;
//   row-parallel (input columns split, a copy): o_proj and every w2 (down); the rank's
//     output is a PARTIAL sum that the decoder all-reduces over the group;
//   replicated: norms, q_norm/k_norm, the router, e_score_correction_bias, the shared
//     expert gate, MLA q_a_proj / kv_a_proj_with_mqa and their norms (the latent KV);
//   vocab-parallel: rows [vocab_shard) of embed_tokens and lm_head.
// The existing blocks run unchanged on (tp_local_config, shard_weights_for_tp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/status.h"

namespace moe {

// OK when `c` can be split over `tp` ranks (tp >= 1). InvalidArgument naming --tp and
// the config.json field otherwise: num_attention_heads, num_key_value_heads (GQA only:
// key/value heads are split, never replicated), intermediate_size (when the model has
// dense layers), moe_intermediate_size (MoE layers), shared_expert_intermediate_size
// (when > 0) not divisible by tp; FP8 models (quantization_config): a row-parallel
// slice (o_proj, a down projection) whose width is not a multiple of the FP8 block
// width weight_block_size[1], naming the tensor and the width.
Status check_tp_shardable(const ModelConfig& c, int tp);

// The config one rank of the group runs: num_attention_heads, num_key_value_heads,
// intermediate_size, moe_intermediate_size and shared_expert_intermediate_size divided
// by tp (a size the model does not use and tp does not divide stays as it is);
// everything else (hidden_size, vocab_size, head_dim, MLA ranks and head dims) kept.
// Precondition: check_tp_shardable(c, tp) is OK.
ModelConfig tp_local_config(const ModelConfig& c, int tp);

// The vocabulary rows [begin, end) of TP rank tp_rank: ceil(vocab / tp) rows per rank,
// the last ranks shorter (possibly empty when tp does not divide vocab).
struct VocabShard {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
VocabShard vocab_shard(int64_t vocab, int tp_rank, int tp);

// Owns the copied row-parallel slices the sharded weights point into (64-byte aligned
// byte buffers whose addresses never change). Must outlive the ModelWeights built with
// it; not thread-safe while shard_weights_for_tp fills it.
struct TpWeightStorage {
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::vector<std::unique_ptr<uint8_t[], Free>> buffers;
  size_t bytes = 0;  // sum of the buffers' sizes
  // A new zeroed buffer of `n` bytes (n may be 0: a valid 64-byte buffer).
  uint8_t* allocate(size_t n);
};

// TP rank tp_rank's (0 <= tp_rank < tp) weights from the full ones `w` (bound with the
// FULL config `full`; experts not loaded there stay unloaded), in the shapes of
// tp_local_config(full, tp). Column-parallel and vocab slices are views into w's
// memory (an FP8 view keeps its block scales, row_block); row-parallel slices are
// copied into *storage, only the rank's columns (an FP8 slice carries the matching
// scale columns). `w`'s memory and *storage must outlive the result.
// Errors (InvalidArgument): check_tp_shardable's; tp_rank out of range; a tensor whose
// shape does not match `full` (naming the tensor); an FP8 row-parallel slice that does
// not start and end on block columns (naming the tensor, its width and the block).
StatusOr<ModelWeights> shard_weights_for_tp(const ModelConfig& full, const ModelWeights& w, int tp_rank, int tp,
                                            TpWeightStorage* storage);

}  // namespace moe
