// Expert computation over a batch of rows: group (row, expert) assignments by expert
// (counting sort), run each expert's SwiGLU FFN on its group as one GEMM job per
// projection (all experts batched into one parallel region per stage), and combine.
//
//   out[r] = sum over j with row_expert[r, j] >= 0 of
//            row_weight[r, j] * w2(silu(w1 x_r) * w3 x_r)   (expert row_expert[r, j])
// summed in ascending expert order for every row. Used by the single-process MoE layer
// (rows = tokens) and by expert parallelism (rows = tokens received from other ranks).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/moe_layer_args.h"
#include "moe/moe/topk_routing.h"
#include "moe/ops/linear.h"

namespace moe {

// Assignments grouped by expert.
struct ExpertGroups {
  std::vector<int> tokens_per_expert;  // [num_experts] assignments per expert
  std::vector<int> offsets;            // [num_experts + 1] prefix sums into token_idx
  std::vector<int> token_idx;          // [num_valid] row of each assignment, by expert
  std::vector<float> weight;           // [num_valid] its weight
};

// Groups the [num_rows, num_topk] assignments of `rows` (num_rows = rows.num_tokens) by
// expert (rows ascending within an expert). Entries with expert id < 0 are skipped
// (slots for experts held elsewhere). Precondition: ids < num_experts.
void group_by_expert(const TopkRoutingView& rows, int num_experts, ExpertGroups* groups);

// Buffers reused across layers and steps. reserve() sizes them once for a batch limit;
// a larger batch still works (the buffers grow: a fallback, not the plan).
struct ExpertWorkspace {
  // Dropless mode's memory bound: at most this many (row, expert) assignments are
  // gathered and computed at once; larger batches are processed in chunks. Buffers:
  // max_chunk_rows * (2 * hidden + 2 * moe_intermediate_size) * 4 bytes.
  int64_t max_chunk_rows = 2048;
  std::vector<float> gathered, gate, up, expert_out;
  std::vector<LinearJob> jobs;
  ExpertGroups groups;
  KernelOptions kernel;  // how the expert projections run (set by the owner)
  std::vector<int> cursor;  // group_by_expert scratch: [num_experts]
  // Optional: called on the calling thread between groups of experts (about
  // kProgressSlices per chunk of rows), e.g. to progress nonblocking exchanges in
  // flight during the compute (ep_moe_layer's overlap). The results do not change: each
  // expert's projections run as the same GEMV/GEMM jobs, only in several parallel
  // regions instead of one.
  std::function<void()> progress;
  static constexpr int kProgressSlices = 4;

  // Capacity for calls of up to max_rows rows of `config`'s MoE layers (call once,
  // after setting max_chunk_rows, before the layer loop).
  void reserve(const ModelConfig& config, int64_t max_rows);
};

// args.x: [num_rows, hidden] f32 (rows: tokens, or rows received from other ranks);
// routing: the rows' expert ids and weights [num_rows, num_topk] (-1: skip the slot);
// args.out: [num_rows, hidden] f32, overwritten. Every expert referenced must be loaded.
void grouped_expert_ffn(const MoeLayerArgs& args, const TopkRoutingView& routing, ExpertWorkspace* ws);

}  // namespace moe
