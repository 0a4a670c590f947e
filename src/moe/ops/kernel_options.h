// How kernels compute, passed to every op that has more than one way (linear,
// causal_attention); the decoder owns one (from EngineOptions::batch_invariant and
// EngineOptions::kernels) and hands it down. A plain value: no process-wide state.
#pragma once

#include "moe/ops/kernel_isa.h"

namespace moe {

struct KernelOptions {
  // Batch-invariant mode (He et al. 2025, "Defeating Nondeterminism in LLM Inference"):
  // each token row's result is bitwise independent of how many rows share the call, so
  // a request's tokens do not depend on what else is in its batch. linear() then runs
  // the GEMV kernel (tokens in groups of at most 4, one fixed accumulation order per
  // row) for any token count instead of sgemm, and causal_attention() takes one query
  // at a time. Off by default (sgemm prefill is faster).
  bool batch_invariant = false;
  // The instruction set of the linear kernels (ops/kernel_isa.h); kAuto = the best this
  // CPU has. Must be supported by the CPU (the engine refuses others by name).
  KernelIsa isa = KernelIsa::kAuto;
  // Prefill GEMMs on bf16 weights round the activations to bf16 (nearest even) and run
  // oneDNN's AVX-512 BF16 matmul (ops/linear_bf16_gemm.h), f32 accumulation: about 2x
  // sgemm on converted weights, at ~2^-9 relative error per activation (what llama.cpp's
  // and PyTorch's bf16 matmuls do; torch.set_float32_matmul_precision("medium")). GEMV
  // (decode, m <= kGemvMaxTokens, and every call when batch_invariant) is unchanged:
  // exact in f32. Needs isa == kAvx512Bf16 (callers refuse it otherwise).
  bool bf16_gemm = false;
};

}  // namespace moe
