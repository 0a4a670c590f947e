// RopeParams (moe/ops/rope.h) from a model's config: rope_theta, rope_scaling
// (none / linear / yarn), rope_interleave and the context the engine serves.
#pragma once

#include "moe/model/config.h"
#include "moe/ops/rope.h"

namespace moe {

// RoPE over `dim` floats per head (GQA: config.head_dim; MLA: mla.qk_rope_head_dim) for
// positions [0, config.max_position_embeddings) (the engine refuses requests past it;
// RopeTable tabulates only a prefix, so a huge value costs no memory).
RopeParams rope_params(const ModelConfig& config, int dim);

}  // namespace moe
