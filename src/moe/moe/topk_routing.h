// The router's output for a batch of tokens as plain, non-owning spans with named dims:
// topk_idx / topk_weights [num_tokens, num_topk], row-major. Written by the router
// (router.h) and the capacity policy (capacity.h); read by the dispatch layout, the
// expert grouping and the expert-parallel exchanges through TopkRoutingView.
//
// Slot j of token t is entry t * num_topk + j; a slot may hold kDroppedExpert (-1),
// an assignment the capacity policy skipped, or (for rows received under expert
// parallelism) an expert computed on another rank. Plain values: copying one copies
// pointers, never data; the caller owns the buffers and keeps them alive.
#pragma once

#include <cstdint>

namespace moe {

// Read-only routing of num_tokens tokens.
struct TopkRoutingView {
  const int* topk_idx = nullptr;        // [num_tokens, num_topk] expert ids, best selection score first
  const float* topk_weights = nullptr;  // [num_tokens, num_topk] f32 combine weights
  int64_t num_tokens = 0;
  int num_topk = 0;

  // Tokens [t0, t0 + n) (same num_topk).
  TopkRoutingView rows(int64_t t0, int64_t n) const {
    return {topk_idx + t0 * num_topk, topk_weights + t0 * num_topk, n, num_topk};
  }
};

// Writable routing of num_tokens tokens, with the optional full selection order.
struct TopkRouting {
  int* topk_idx = nullptr;        // [num_tokens, num_topk]
  float* topk_weights = nullptr;  // [num_tokens, num_topk] f32
  int64_t num_tokens = 0;
  int num_topk = 0;
  // Optional [num_tokens, num_experts]: every expert each token may use (not masked by
  // a group or node limit) in selection order, the top-k first, then -1 padding. The
  // router fills it when set; the capacity policy's reroute walks it.
  int* ranked = nullptr;

  TopkRoutingView view() const { return {topk_idx, topk_weights, num_tokens, num_topk}; }
};

}  // namespace moe
