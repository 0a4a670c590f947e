// The inputs of one MoE block call, named: the block's config and weights, the
// activations in and the output, as tensor views.
//   x:   [num_tokens, hidden] f32, contiguous (post-attention-norm activations)
//   out: [num_tokens, hidden] f32, contiguous, overwritten; must not alias x
// The config, weights and buffers are the caller's and must outlive the call. A rank
// with no tokens this step (expert parallelism) passes num_tokens = 0 and null data.
#pragma once

#include <cstdint>

#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/tensor/tensor.h"

namespace moe {

struct MoeLayerArgs {
  const ModelConfig& config;
  const LayerWeights& layer;  // router, score bias and experts of this MoE layer
  TensorView x;               // [num_tokens, hidden] f32
  TensorView out;             // [num_tokens, hidden] f32

  // Views over raw f32 rows: x and out [num_tokens, config.hidden_size].
  static MoeLayerArgs f32(const ModelConfig& config, const LayerWeights& layer, const float* x, int64_t num_tokens,
                          float* out) {
    return {config, layer, TensorView::f32(x, {num_tokens, config.hidden_size}),
            TensorView::f32(out, {num_tokens, config.hidden_size})};
  }

  int64_t num_tokens() const { return x.dim(0); }
  int64_t hidden() const { return config.hidden_size; }
  const float* x_data() const { return x.data_as<const float>(); }
  float* out_data() const { return out.data_as<float>(); }
};

// Aborts (MOE_CHECK: a caller's bug, not bad input) unless x and out are contiguous
// f32 [num_tokens, hidden] on the CPU with the same num_tokens. Every entry point of
// the MoE block calls it once, before computing on raw pointers.
void check_moe_layer_args(const MoeLayerArgs& args);

}  // namespace moe
