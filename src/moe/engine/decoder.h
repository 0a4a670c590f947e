// The decoder forward pass (Mixtral family): embedding -> L x [RMSNorm -> GQA
// attention with RoPE -> residual -> RMSNorm -> sparse MoE -> residual] -> RMSNorm ->
// lm_head. Reference: transformers/models/mixtral/modeling_mixtral.py.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/engine/kv_cache.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/moe_layer.h"
#include "moe/ops/rope.h"

namespace moe {

class Decoder {
 public:
  // `config` and `weights` must outlive the decoder.
  Decoder(const ModelConfig& config, const ModelWeights& weights);

  // Runs m tokens at positions [start_pos, start_pos + m), appending their K/V to
  // `cache`, and writes the logits of the LAST token to logits [vocab].
  // Prompts are processed in chunks of at most kMaxChunk tokens (prefill); m == 1 is a
  // decode step. Token ids must be in [0, vocab) (checked by the engine).
  void forward(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits);

  static constexpr int64_t kMaxChunk = 512;

 private:
  void forward_chunk(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  RopeTable rope_;
  // Workspaces, grown on demand: [m, hidden] / [m, q_dim] / [m, kv_dim].
  std::vector<float> x_, h_, q_, k_, v_, attn_, moe_out_;
  MoeWorkspace moe_ws_;
};

}  // namespace moe
