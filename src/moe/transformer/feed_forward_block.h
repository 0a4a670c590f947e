// The MLP half of a decoder layer behind one small interface: a dense SwiGLU MLP, the
// sparse MoE block in one process, or the MoE block expert-parallel over ranks
// (mlp_blocks.h). The decoder picks one per layer.
#pragma once

#include "moe/status.h"
#include "moe/tensor/tensor.h"

namespace moe {

class FeedForwardBlock {
 public:
  virtual ~FeedForwardBlock() = default;

  // Layer `layer` over m token rows:
  //   x:   [m, hidden] f32, post_attention_layernorm applied
  //   out: [m, hidden] f32, overwritten (must not alias x)
  // m may be 0 under expert parallelism (the rank only joins the exchanges; x and out
  // may then be empty views). Errors: communication (expert parallelism only).
  // Not thread-safe: one forward at a time per block.
  virtual Status forward(int layer, const TensorView& x, const TensorView& out) = 0;
};

}  // namespace moe
