// Rotary position embeddings (Su et al. 2021, RoFormer) with the variants the supported
// models use:
//   layout  kRotateHalf (transformers' rotate_half: dimension i pairs with i + dim/2) or
//           kInterleaved (pairs (2i, 2i+1): GPT-J, DeepSeek `rope_interleave`). Pair i
//           rotates by angle pos * inv_freq[i] in both layouts. transformers runs the
//           interleaved case by de-interleaving q and k first, which permutes the output
//           but leaves every q.k dot product unchanged; here the pairs stay in place.
//   scaling kNone:   inv_freq[i] = 1 / theta^(2i/dim)
//           kLinear: inv_freq / factor (transformers "linear")
//           kYarn:   YaRN (Peng et al. 2023) exactly as transformers'
//                    _compute_yarn_parameters and DeepSeek's DeepseekV3YarnRotaryEmbedding:
//                    a per-frequency blend of inv_freq / factor and inv_freq over the
//                    correction range of beta_fast..beta_slow rotations at
//                    original_max_position_embeddings, and cos/sin multiplied by
//                    yarn_attention_factor().
// The ops layer knows nothing of ModelConfig: callers build RopeParams from it
// (moe/transformer/rope_config.h).
#pragma once

#include <cstdint>
#include <vector>

#include "moe/tensor/tensor.h"

namespace moe {

enum class RopeLayout { kRotateHalf, kInterleaved };

struct RopeParams {
  enum class Scaling { kNone, kLinear, kYarn };
  int dim = 0;              // rotated floats per head (even, > 0)
  double theta = 10000.0;   // rope_theta (> 0)
  RopeLayout layout = RopeLayout::kRotateHalf;
  // Positions accepted by apply(): [0, max_positions). Only a prefix of at most
  // RopeTable::kMaxCachedPositions is tabulated; later positions are computed per call
  // with the same f32 arithmetic (bit-identical results), so a huge context costs no memory.
  int64_t max_positions = 0;
  Scaling scaling = Scaling::kNone;
  double factor = 1.0;                        // kLinear, kYarn (>= 1)
  int original_max_position_embeddings = 0;   // kYarn (> 0)
  double beta_fast = 32.0, beta_slow = 1.0;   // kYarn (> 0)
  double mscale = 1.0, mscale_all_dim = 0.0;  // kYarn (0 = absent)
  double attention_factor = 0.0;              // kYarn: overrides the mscale ratio when > 0
};

// DeepSeek's yarn_get_mscale: 1 when scale <= 1, else 0.1 * m * ln(scale) + 1.
double yarn_get_mscale(double scale, double m = 1.0);

// The factor YaRN multiplies cos and sin by: p.attention_factor when > 0, else
// get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both mscale and
// mscale_all_dim are non-zero, else get_mscale(factor). 1 unless p.scaling is kYarn.
double yarn_attention_factor(const RopeParams& p);

// What MLA multiplies its softmax scale (qk_head_dim^-0.5) by (transformers'
// DeepseekV3Attention): get_mscale(factor, mscale_all_dim)^2 when p.scaling is kYarn and
// mscale_all_dim != 0, else 1.
double yarn_softmax_scale_multiplier(const RopeParams& p);

// The f32 per-pair frequencies of `p`, [dim / 2], as transformers computes them.
// Requires p.dim even and > 0 (MOE_CHECK).
std::vector<float> rope_inv_freq(const RopeParams& p);

// Immutable after construction; apply() is const and thread-safe.
class RopeTable {
 public:
  // Tabulated positions at most (the table is [cached, dim / 2] cos and sin).
  static constexpr int64_t kMaxCachedPositions = 8192;

  // Checks p (MOE_CHECK: dim even and > 0, theta > 0, max_positions >= 0, YaRN fields
  // valid) and tabulates cos/sin for the first min(max_positions, kMaxCachedPositions)
  // positions.
  explicit RopeTable(const RopeParams& p);
  // Unscaled rotate_half RoPE over `head_dim` floats (the original constructor).
  RopeTable(int head_dim, double theta, int64_t max_positions);

  // Rotates x in place: [m, num_heads, dim] f32, contiguous, token t at position
  // start_pos + t. Checks the view (MOE_CHECK; dim(2) must equal the table's dim and
  // start_pos + m <= max_positions), then runs the CPU kernel below.
  void apply(const TensorView& x, int64_t start_pos) const;

  // Where the heads to rotate sit: head h of token t starts at
  // x + t * row_stride + h * head_stride and holds dim() floats. x may point at an offset
  // inside wider heads, e.g. the rope part of MLA's [heads][nope | rope] rows (x = row + nope,
  // head_stride = nope + rope); the floats around the rotated ones are left alone.
  struct Rows {
    float* x = nullptr;
    int64_t m = 0;           // tokens
    int64_t row_stride = 0;  // floats from one token to the next
    int num_heads = 0;
    int64_t head_stride = 0;  // floats from one head to the next; 0 = dim() (contiguous heads)
  };

  // CPU kernel on raw pointers: rotates `rows` in place, token t at position
  // start_pos + t. Requires start_pos >= 0 and start_pos + m <= max_positions (MOE_CHECK).
  void apply(const Rows& rows, int64_t start_pos) const;
  // Same with contiguous heads of dim() floats.
  void apply(float* x, int64_t m, int64_t row_stride, int num_heads, int64_t start_pos) const {
    apply(Rows{.x = x, .m = m, .row_stride = row_stride, .num_heads = num_heads}, start_pos);
  }

  int dim() const { return dim_; }
  RopeLayout layout() const { return layout_; }
  int64_t max_positions() const { return max_positions_; }
  int64_t cached_positions() const { return cached_; }
  float attention_factor() const { return attention_factor_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  // cos/sin of position p for every pair, [dim / 2] each (from the table or computed).
  void angles(int64_t p, float* c, float* s) const;

  int dim_;
  RopeLayout layout_;
  int64_t max_positions_;
  int64_t cached_;
  float attention_factor_;
  std::vector<float> inv_freq_;   // [dim / 2]
  std::vector<float> cos_, sin_;  // [cached, dim / 2], already times attention_factor_
};

}  // namespace moe
