#include "moe/transformer/rope_config.h"

namespace moe {

RopeParams rope_params(const ModelConfig& config, int dim) {
  const RopeScaling& s = config.rope_scaling;
  RopeParams p;
  p.dim = dim;
  p.theta = config.rope_theta;
  p.layout = config.rope_interleave ? RopeLayout::kInterleaved : RopeLayout::kRotateHalf;
  p.max_positions = config.max_position_embeddings;
  switch (s.type) {
    case RopeScaling::Type::kNone:
      p.scaling = RopeParams::Scaling::kNone;
      break;
    case RopeScaling::Type::kLinear:
      p.scaling = RopeParams::Scaling::kLinear;
      break;
    case RopeScaling::Type::kYarn:
      p.scaling = RopeParams::Scaling::kYarn;
      break;
  }
  p.factor = s.factor;
  p.original_max_position_embeddings = s.original_max_position_embeddings;
  p.beta_fast = s.beta_fast;
  p.beta_slow = s.beta_slow;
  p.mscale = s.mscale;
  p.mscale_all_dim = s.mscale_all_dim;
  p.attention_factor = s.attention_factor;
  return p;
}

}  // namespace moe
