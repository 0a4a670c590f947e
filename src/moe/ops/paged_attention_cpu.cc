#include "moe/ops/attention_cpu.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "moe/ops/attend_query.h"

namespace moe::cpu {

namespace {

// Elem: float, detail::Bf16 or detail::F16 (the pools' dtype).
template <typename Elem>
void paged_attention_typed(const PagedAttentionSeq* seqs, size_t num_seqs, const PagedPools& pools,
                           const AttentionShape& s) {
  const Elem* k_layer = static_cast<const Elem*>(pools.k_layer);
  const Elem* v_layer = static_cast<const Elem*>(pools.v_layer);
  const int block_size = pools.block_size;
  const int hd = s.head_dim;
  const int64_t row = static_cast<int64_t>(s.num_heads) * hd;
  const int group = s.num_heads / s.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t head_stride = static_cast<int64_t>(block_size) * hd;            // one KV head of a block
  const int64_t block_stride = static_cast<int64_t>(s.num_kv_heads) * head_stride;  // one block
  // Work items: (sequence, query row); each covers all heads.
  struct Item {
    uint32_t seq;
    int64_t t;
  };
  // Reused by the calling thread: no allocation per layer in the steady state.
  static thread_local std::vector<Item> items;
  items.clear();
  int64_t work = 0;
  for (size_t i = 0; i < num_seqs; ++i) {
    for (int64_t t = 0; t < seqs[i].m; ++t) {
      items.push_back({static_cast<uint32_t>(i), t});
      work += seqs[i].start_pos + t + 1;
    }
  }
  const int64_t n_items = static_cast<int64_t>(items.size());
  const bool parallel = n_items > 1 && work * s.num_heads >= 4096;
  const Item* item_ptr = items.data();  // the thread_local is the calling thread's
#pragma omp parallel if (parallel)
  {
    static thread_local std::vector<float> scores;  // per OpenMP thread, reused across calls
#pragma omp for schedule(dynamic, 4)
    for (int64_t it = 0; it < n_items; ++it) {
      const PagedAttentionSeq& sq = seqs[item_ptr[it].seq];
      const int64_t t = item_ptr[it].t;
      const int64_t ctx = sq.start_pos + t + 1;
      scores.resize(static_cast<size_t>(ctx));
      const int32_t* table = sq.block_table;
      for (int h = 0; h < s.num_heads; ++h) {
        const int64_t kvh = h / group;
        auto locate = [&](const Elem* pool) {
          return [pool, table, block_size, block_stride, head_stride, kvh, hd](int64_t p) {
            return pool + table[p / block_size] * block_stride + kvh * head_stride + (p % block_size) * hd;
          };
        };
        detail::attend_query({sq.q + t * row + h * hd, ctx, hd, scale, scores.data(), sq.out + t * row + h * hd},
                             locate(k_layer), locate(v_layer));
      }
    }
  }
}

}  // namespace

void paged_causal_attention(const PagedAttentionSeq* seqs, size_t num_seqs, const PagedPools& pools,
                            const AttentionShape& s) {
  switch (pools.dtype) {
    case DType::kBF16: paged_attention_typed<detail::Bf16>(seqs, num_seqs, pools, s); return;
    case DType::kF16: paged_attention_typed<detail::F16>(seqs, num_seqs, pools, s); return;
    default: paged_attention_typed<float>(seqs, num_seqs, pools, s); return;
  }
}

}  // namespace moe::cpu
