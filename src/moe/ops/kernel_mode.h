// Process-wide kernel selection. Batch-invariant mode (He et al. 2025, "Defeating
// Nondeterminism in LLM Inference"): each token row's result is bitwise independent of
// how many rows share the call, so a request's tokens do not depend on what else is in
// its batch. linear() then runs the GEMV kernel (tokens in groups of at most 4, one
// fixed accumulation order per row) for any token count instead of sgemm, and
// causal_attention() takes one query at a time. Off by default (sgemm prefill is
// faster). Set before running kernels, not while they run.
#pragma once

namespace moe {

void set_batch_invariant_kernels(bool on);
bool batch_invariant_kernels();

}  // namespace moe
