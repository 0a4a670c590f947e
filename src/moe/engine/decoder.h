// The decoder forward pass (Mixtral family): embedding -> L x [RMSNorm -> GQA
// attention with RoPE -> residual -> RMSNorm -> sparse MoE -> residual] -> RMSNorm ->
// lm_head. Reference: transformers/models/mixtral/modeling_mixtral.py.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "moe/engine/kv_cache.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/moe_layer.h"
#include "moe/ops/rope.h"

namespace moe {

class Decoder {
 public:
  // `config` and `weights` must outlive the decoder. With `ep` (not owned), MoE layers
  // run expert-parallel over ep->comm.
  Decoder(const ModelConfig& config, const ModelWeights& weights, const EpContext* ep = nullptr);

  // Runs m tokens at positions [start_pos, start_pos + m), appending their K/V to
  // `cache`, and writes the logits of the LAST token to logits [vocab].
  // Prompts are processed in chunks of at most kMaxChunk tokens (prefill); m == 1 is a
  // decode step. Token ids must be in [0, vocab) (checked by the engine). Under EP,
  // every rank must make the same sequence of forward_chunk calls (rank 0 drives,
  // the others call forward_chunk with m = 0; see Engine). Errors: communication.
  Status forward(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits);
  // One chunk of at most kMaxChunk tokens; m == 0 only joins the MoE exchanges.
  Status forward_chunk(const int* tokens, int64_t m, int64_t start_pos, KVCache* cache, float* logits);

  // Before each chunk (rank 0 under EP): called with the chunk's size.
  void set_chunk_hook(std::function<Status(int64_t m)> hook) { chunk_hook_ = std::move(hook); }
  const EpTimings& ep_timings() const { return ep_timings_; }

  static constexpr int64_t kMaxChunk = 512;

 private:
  const ModelConfig& config_;
  const ModelWeights& weights_;
  RopeTable rope_;
  // Workspaces, grown on demand: [m, hidden] / [m, q_dim] / [m, kv_dim].
  std::vector<float> x_, h_, q_, k_, v_, attn_, moe_out_;
  MoeWorkspace moe_ws_;
  const EpContext* ep_ = nullptr;
  EpWorkspacePtr ep_ws_;
  EpTimings ep_timings_;
  std::function<Status(int64_t)> chunk_hook_;
};

}  // namespace moe
