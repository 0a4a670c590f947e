// "--weights int8" (EngineOptions::weights): the model's projection matrices quantised
// once, at load, to 8-bit codes with per-block scales, the layout of llama.cpp's q8_0
// with an f32 scale (1.125 bytes per weight instead of bf16's 2):
//
//   W[r, c] ~= code[r, c] * scale[r, c / 32],  code in [-127, 127] (int8, DType::kI8),
//   scale[r, b] = max_c |W[r, c]| / 127 over the block, code = nearbyint(W * (1/scale)).
//
// The source may be any dtype (bf16/f16/f32, or FP8 times its own scales). The result
// is a Weight2D of dtype kI8 with block_rows 1, block_cols 32 and f32 scales, its codes
// followed by its scales in one buffer; the GEMV kernels read it directly
// (ops/linear_kernels.h: VNNI or AVX2), prefill too. Matrices whose column count is not
// a multiple of 32 keep their dtype (can_quantize_int8).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "moe/model/weights.h"
#include "moe/tensor/weight.h"

namespace moe {

// Whether w can be quantised: present, not already int8, cols % 32 == 0.
bool can_quantize_int8(const Weight2D& w);

// The int8 copy of w (can_quantize_int8) in *buffer (replaced: codes then f32 scales);
// the view points into *buffer and lives while it does.
Weight2D quantize_to_int8(const Weight2D& w, std::vector<uint8_t>* buffer);

// The three matrices of one expert into one new buffer, w1 | w1 scales | w2 | ... | w3
// scales (the layout expert migration sends); false (buffer untouched) if none of the
// three can be quantised. Safe when *buffer holds the bytes the expert points to now.
bool quantize_expert_to_int8(ExpertWeights* expert, std::vector<uint8_t>* buffer);

// Every projection of *weights: attention (GQA and MLA), dense and shared MLPs and
// lm_head into new buffers appended to *owned; loaded routed experts of layer l into
// *expert_buffer(l, e). The router, the shared-expert gate and the embedding stay as
// they are. Returns the number of matrices quantised.
using Int8ExpertBufferFn = std::function<std::vector<uint8_t>*(int layer, int expert)>;
int64_t quantize_weights_to_int8(ModelWeights* weights, std::vector<std::vector<uint8_t>>* owned,
                                 const Int8ExpertBufferFn& expert_buffer);

}  // namespace moe
