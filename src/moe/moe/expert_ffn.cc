#include "moe/moe/expert_ffn.h"

#include <algorithm>
#include <cstring>

#include "moe/core/check.h"
#include "moe/ops/activation.h"

namespace moe {
namespace {

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// group_by_expert with its cursor scratch.
void group_rows(const TopkRoutingView& rows, int num_experts, ExpertGroups* g, std::vector<int>* cursor_scratch) {
  const int* topk_idx = rows.topk_idx;
  const float* topk_weights = rows.topk_weights;
  const int top_k = rows.num_topk;
  const int64_t n = rows.num_tokens * top_k;
  g->tokens_per_expert.assign(static_cast<size_t>(num_experts), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (topk_idx[i] >= 0) ++g->tokens_per_expert[static_cast<size_t>(topk_idx[i])];
  }
  g->offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (int e = 0; e < num_experts; ++e) {
    g->offsets[static_cast<size_t>(e) + 1] =
        g->offsets[static_cast<size_t>(e)] + g->tokens_per_expert[static_cast<size_t>(e)];
  }
  const size_t valid = static_cast<size_t>(g->offsets.back());
  g->token_idx.resize(valid);
  g->weight.resize(valid);
  std::vector<int>& cursor = *cursor_scratch;
  cursor.assign(g->offsets.begin(), g->offsets.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int e = topk_idx[i];
    if (e < 0) continue;
    const int pos = cursor[static_cast<size_t>(e)]++;
    g->token_idx[static_cast<size_t>(pos)] = static_cast<int>(i / top_k);
    g->weight[static_cast<size_t>(pos)] = topk_weights[i];
  }
}

}  // namespace

void group_by_expert(const TopkRoutingView& rows, int num_experts, ExpertGroups* groups) {
  std::vector<int> cursor;
  group_rows(rows, num_experts, groups, &cursor);
}

void ExpertWorkspace::reserve(const ModelConfig& config, int64_t max_rows) {
  const size_t E = static_cast<size_t>(config.router.num_experts);
  const int64_t hidden = config.hidden_size, inter = config.moe_intermediate_size;
  const int64_t assignments = max_rows * config.router.top_k;
  const int64_t cap = std::min(assignments, std::max<int64_t>(1, max_chunk_rows));
  gathered.reserve(static_cast<size_t>(cap * hidden));
  expert_out.reserve(static_cast<size_t>(cap * hidden));
  gate.reserve(static_cast<size_t>(cap * inter));
  up.reserve(static_cast<size_t>(cap * inter));
  jobs.reserve(2 * E);
  groups.tokens_per_expert.reserve(E);
  groups.offsets.reserve(E + 1);
  groups.token_idx.reserve(static_cast<size_t>(assignments));
  groups.weight.reserve(static_cast<size_t>(assignments));
  cursor.reserve(E);
}

void grouped_expert_ffn(const MoeLayerArgs& args, const TopkRoutingView& routing, ExpertWorkspace* ws) {
  check_moe_layer_args(args);
  MOE_CHECK(routing.num_tokens == args.num_tokens());
  const ModelConfig& config = args.config;
  const LayerWeights& layer = args.layer;
  const float* x = args.x_data();
  float* out = args.out_data();
  const int64_t num_rows = routing.num_tokens;
  const int num_experts = config.router.num_experts;
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.moe_intermediate_size;
  group_rows(routing, num_experts, &ws->groups, &ws->cursor);
  const ExpertGroups& g = ws->groups;
  const int64_t n_assign = g.offsets.back();
  if (num_rows > 0) std::memset(out, 0, static_cast<size_t>(num_rows * hidden) * sizeof(float));
  // Dropless without unbounded memory: the grouped assignments are processed in chunks
  // of at most max_chunk_rows (an expert's batch may span chunks), in assignment order,
  // so each row still sums its experts in ascending expert order.
  const int64_t chunk = std::max<int64_t>(1, ws->max_chunk_rows);
  const int64_t cap = std::min(n_assign, chunk);
  float* xe = grow(ws->gathered, static_cast<size_t>(cap * hidden));  // [cap, hidden]
  float* gate = grow(ws->gate, static_cast<size_t>(cap * inter));     // [cap, inter]
  float* up = grow(ws->up, static_cast<size_t>(cap * inter));         // [cap, inter]
  float* ye = grow(ws->expert_out, static_cast<size_t>(cap * hidden));  // [cap, hidden]
  std::vector<LinearJob>& jobs = ws->jobs;
  for (int64_t c0 = 0; c0 < n_assign; c0 += chunk) {
    const int64_t c1 = std::min(n_assign, c0 + chunk);
    for (int64_t i = c0; i < c1; ++i) {
      std::memcpy(xe + (i - c0) * hidden, x + static_cast<int64_t>(g.token_idx[static_cast<size_t>(i)]) * hidden,
                  static_cast<size_t>(hidden) * sizeof(float));
    }
    // Expert segments [begin, end) of this chunk, relative to c0.
    auto for_each_segment = [&](int e0, int e1, auto&& fn) {
      for (int e = e0; e < e1; ++e) {
        const int64_t begin = std::max<int64_t>(g.offsets[static_cast<size_t>(e)], c0);
        const int64_t end = std::min<int64_t>(g.offsets[static_cast<size_t>(e) + 1], c1);
        if (end > begin) fn(e, begin - c0, end - begin);
      }
    };
    // Experts [e0, e1) of this chunk: w1/w3, SwiGLU, w2; with a progress hook the
    // experts go in kProgressSlices slices, the hook called after each.
    auto run_experts = [&](int e0, int e1) {
      jobs.clear();
      int64_t r0 = -1, r1 = -1;  // the slice's rows, relative to c0 (contiguous: assignments sorted by expert)
      for_each_segment(e0, e1, [&](int e, int64_t begin, int64_t n) {
        const ExpertWeights& ew = layer.experts[static_cast<size_t>(e)];
        MOE_CHECK(ew.loaded);
        jobs.push_back({xe + begin * hidden, n, &ew.w1, gate + begin * inter});
        jobs.push_back({xe + begin * hidden, n, &ew.w3, up + begin * inter});
        if (r0 < 0) r0 = begin;
        r1 = begin + n;
      });
      if (jobs.empty()) return;
      linear_many(jobs.data(), jobs.size(), ws->kernel);
      silu_mul(gate + r0 * inter, up + r0 * inter, (r1 - r0) * inter, gate + r0 * inter);
      jobs.clear();
      for_each_segment(e0, e1, [&](int e, int64_t begin, int64_t n) {
        jobs.push_back({gate + begin * inter, n, &layer.experts[static_cast<size_t>(e)].w2, ye + begin * hidden});
      });
      linear_many(jobs.data(), jobs.size(), ws->kernel);
    };
    if (!ws->progress) {
      run_experts(0, num_experts);
    } else {
      const int step = std::max(1, (num_experts + ExpertWorkspace::kProgressSlices - 1) / ExpertWorkspace::kProgressSlices);
      for (int e0 = 0; e0 < num_experts; e0 += step) {
        run_experts(e0, std::min(num_experts, e0 + step));
        ws->progress();
      }
    }
    // Combine in assignment order = ascending expert id for every row.
    for (int64_t i = c0; i < c1; ++i) {
      const float w = g.weight[static_cast<size_t>(i)];
      float* dst = out + static_cast<int64_t>(g.token_idx[static_cast<size_t>(i)]) * hidden;
      const float* src = ye + (i - c0) * hidden;
      for (int64_t h = 0; h < hidden; ++h) dst[h] += w * src[h];
    }
  }
}

}  // namespace moe
