// "--fp8 dequant": FP8 weights (F8_E4M3 + block scales) dequantised once, at load, to
// bf16 copies that the ordinary bf16 kernels read (EngineOptions::fp8_mode). The other
// mode, "native", keeps FP8 in memory and dequantises in the GEMV/GEMM kernel
// (ops/linear_fp8_cpu.h): half the bytes per decode token.
//
// Each value is bf16(f8e4m3_to_f32(code) * scale), the f32 product the native kernel
// forms, rounded once to bf16 (nearest even), as DeepSeek's fp8_cast_bf16.py does.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "moe/model/weights.h"
#include "moe/tensor/weight.h"

namespace moe {

// A bf16 copy of `w` (any dtype; an FP8 one times its scales), stored in *buffer
// (resized to rows * cols * 2 bytes, replacing its contents); the returned view points
// into *buffer and lives while it does (a moved vector keeps its data).
Weight2D dequantize_to_bf16(const Weight2D& w, std::vector<uint8_t>* buffer);

// Dequantises the FP8 matrices of one expert (w1, w2, w3) into one new buffer
// (w1 | w2 | w3 bf16) that replaces *buffer; the expert then points into it. No-op
// (buffer untouched, returns false) if none of the three is FP8. Safe when *buffer
// holds the FP8 bytes the expert points to now (they are read before it is replaced).
bool dequantize_expert_to_bf16(ExpertWeights* expert, std::vector<uint8_t>* buffer);

// Every FP8 matrix of *weights that is still FP8: attention projections (GQA and MLA), dense and shared
// MLPs into new buffers appended to *owned; loaded routed experts of layer l into
// *expert_buffer(l, e) (the engine's ExpertStore entry, which migration and failover
// replace or free with the expert). Returns the number of matrices dequantised.
using ExpertBufferFn = std::function<std::vector<uint8_t>*(int layer, int expert)>;
int64_t dequantize_weights_to_bf16(ModelWeights* weights, std::vector<std::vector<uint8_t>>* owned,
                                   const ExpertBufferFn& expert_buffer);

}  // namespace moe
