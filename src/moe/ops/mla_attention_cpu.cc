#include <omp.h>

#include <vector>

#include "moe/ops/attend_query.h"
#include "moe/ops/mla_attention.h"

namespace moe {
namespace {

struct Item {
  uint32_t seq;
  int64_t t;
};

// (sequence, query row) work items and the total attended positions (for the
// parallel threshold).
int64_t build_items(const MlaSeq* seqs, size_t num_seqs, std::vector<Item>* items) {
  items->clear();
  int64_t work = 0;
  for (size_t i = 0; i < num_seqs; ++i) {
    for (int64_t t = 0; t < seqs[i].m; ++t) {
      items->push_back({static_cast<uint32_t>(i), t});
      work += seqs[i].start_pos + t + 1;
    }
  }
  return work;
}

}  // namespace

void mla_latent_attention(const MlaSeq* seqs, size_t num_seqs, const LatentRows& cache, const MlaAttentionShape& s) {
  static thread_local std::vector<Item> items;
  const int64_t work = build_items(seqs, num_seqs, &items);
  const int64_t n_items = static_cast<int64_t>(items.size());
  const bool parallel = n_items > 1 && work * s.heads >= 4096;
  const Item* item_ptr = items.data();
  const int64_t q_row = static_cast<int64_t>(s.heads) * s.qk_dim;
  const int64_t o_row = static_cast<int64_t>(s.heads) * s.v_dim;
#pragma omp parallel if (parallel)
  {
    static thread_local std::vector<float> scores;
#pragma omp for schedule(dynamic, 4)
    for (int64_t it = 0; it < n_items; ++it) {
      const MlaSeq& sq = seqs[item_ptr[it].seq];
      const int64_t t = item_ptr[it].t;
      const int64_t ctx = sq.start_pos + t + 1;
      scores.resize(static_cast<size_t>(ctx));
      const int32_t* table = sq.block_table;
      const LatentRows c = cache;
      auto row_at = [c, table](int64_t p) {
        if (c.block_size == 0) return c.base + p * c.row;
        return c.base + (static_cast<int64_t>(table[p / c.block_size]) * c.block_size + p % c.block_size) * c.row;
      };
      for (int h = 0; h < s.heads; ++h) {
        detail::attend_query({sq.q + t * q_row + static_cast<int64_t>(h) * s.qk_dim, ctx, s.qk_dim, s.scale,
                              scores.data(), sq.out + t * o_row + static_cast<int64_t>(h) * s.v_dim, s.v_dim},
                             row_at, row_at);
      }
    }
  }
}

void mla_expanded_attention(const MlaSeq& seq, const float* keys, const float* values, const MlaAttentionShape& s) {
  const int64_t n_items = seq.m * s.heads;
  const int64_t q_row = static_cast<int64_t>(s.heads) * s.qk_dim;
  const int64_t o_row = static_cast<int64_t>(s.heads) * s.v_dim;
  const bool parallel = n_items > 1 && (seq.start_pos + seq.m) * n_items >= 4096;
#pragma omp parallel if (parallel)
  {
    static thread_local std::vector<float> scores;
#pragma omp for schedule(dynamic, 4)
    for (int64_t it = 0; it < n_items; ++it) {
      const int64_t t = it / s.heads;
      const int h = static_cast<int>(it % s.heads);
      const int64_t ctx = seq.start_pos + t + 1;
      scores.resize(static_cast<size_t>(ctx));
      const float* k = keys + static_cast<int64_t>(h) * s.qk_dim;
      const float* v = values + static_cast<int64_t>(h) * s.v_dim;
      detail::attend_query({seq.q + t * q_row + static_cast<int64_t>(h) * s.qk_dim, ctx, s.qk_dim, s.scale,
                            scores.data(), seq.out + t * o_row + static_cast<int64_t>(h) * s.v_dim, s.v_dim},
                           [k, q_row](int64_t p) { return k + p * q_row; },
                           [v, o_row](int64_t p) { return v + p * o_row; });
    }
  }
}

}  // namespace moe
