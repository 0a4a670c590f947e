// Rotary position embeddings (Su et al. 2021, RoFormer), in HF's "rotate_half" layout:
// dimension i pairs with i + head_dim/2, angle = pos * theta^(-2i/head_dim).
#pragma once

#include <cstdint>
#include <vector>

#include "moe/tensor/tensor.h"

namespace moe {

class RopeTable {
 public:
  // Precomputes cos/sin for positions [0, max_positions). inv_freq is computed in f32
  // exactly as transformers does (1 / theta^(arange(0, d, 2) / d)).
  RopeTable(int head_dim, double theta, int64_t max_positions);

  // Rotates x in place: [m, num_heads, head_dim] f32, contiguous, token t at position
  // start_pos + t. Checks the view (MOE_CHECK; head_dim must match the table and
  // start_pos + m <= max_positions), then runs the CPU kernel below.
  void apply(const TensorView& x, int64_t start_pos) const;

  // The CPU kernel, on raw pointers (rows may be strided):
  // rotates, in place, `num_heads` heads of `head_dim` floats for each of m tokens:
  //   x: [m, num_heads * head_dim] with row stride `row_stride` floats; token t at position
  //   start_pos + t. Requires start_pos + m <= max_positions.
  void apply(float* x, int64_t m, int64_t row_stride, int num_heads, int64_t start_pos) const;

  int64_t max_positions() const { return max_positions_; }

 private:
  int head_dim_;
  int64_t max_positions_;
  std::vector<float> cos_, sin_;  // [max_positions, head_dim / 2]
};

}  // namespace moe
