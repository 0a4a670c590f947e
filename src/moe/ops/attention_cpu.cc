#include "moe/ops/attention_cpu.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <optional>
#include <cmath>
#include <vector>

#include "moe/ops/activation.h"
#include "moe/ops/attend_query.h"
#include "moe/ops/blas_threads.h"

namespace moe {
namespace {

constexpr int64_t kQueryBlock = 128;  // queries per sgemm block (bounds scratch memory)

// One query row against one KV head (decode path).
template <typename Elem>
void attend_one(const detail::QueryTask& task, const Elem* k, const Elem* v) {
  const int hd = task.hd;
  detail::attend_query(
      task, [k, hd](int64_t p) { return k + p * hd; }, [v, hd](int64_t p) { return v + p * hd; });
}

// rows [n, hd] of a 16-bit cache -> f32 (the sgemm path's operand).
template <typename Elem>
const float* widen(const Elem* rows, int64_t n, std::vector<float>* scratch) {
  if constexpr (std::is_same_v<Elem, float>) {
    return rows;
  } else {
    scratch->resize(static_cast<size_t>(n));
    convert_to_f32(rows, std::is_same_v<Elem, detail::Bf16> ? DType::kBF16 : DType::kF16, scratch->data(),
                   static_cast<size_t>(n));
    return scratch->data();
  }
}

// Elem: float, detail::Bf16 or detail::F16 (the cache's dtype).
template <typename Elem>
void causal_attention_typed(const cpu::CausalAttentionArgs& args, const AttentionShape& s,
                            const KernelOptions& options) {
  const float* q = args.q;
  const int64_t m = args.m;
  const int64_t start_pos = args.start_pos;
  const Elem* k_cache = static_cast<const Elem*>(args.k_cache);
  const Elem* v_cache = static_cast<const Elem*>(args.v_cache);
  float* out = args.out;
  const int hd = s.head_dim;
  const int64_t row = static_cast<int64_t>(s.num_heads) * hd;
  const int group = s.num_heads / s.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t total_ctx = start_pos + m;
  const int64_t num_qblocks = (m + kQueryBlock - 1) / kQueryBlock;
  const int64_t work = static_cast<int64_t>(s.num_heads) * num_qblocks;
  const bool parallel = total_ctx * m * s.num_heads >= 4096;
  std::optional<ScopedSerialBlas> serial_blas;
  if (!parallel) serial_blas.emplace();

#pragma omp parallel if (parallel)
  {
    static thread_local std::vector<float> scores;  // per OpenMP thread, reused across calls
    static thread_local std::vector<float> k_f32, v_f32;  // a 16-bit cache's head, widened (sgemm path)
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < work; ++item) {
      const int h = static_cast<int>(item / num_qblocks);
      const int64_t qb = item % num_qblocks;
      const int kvh = h / group;
      const Elem* k = k_cache + static_cast<int64_t>(kvh) * s.capacity * hd;
      const Elem* v = v_cache + static_cast<int64_t>(kvh) * s.capacity * hd;
      const int64_t t0 = qb * kQueryBlock;
      const int64_t nq = std::min(kQueryBlock, m - t0);
      const int64_t ctx = start_pos + t0 + nq;  // keys visible to the block's last query
      if (nq <= 2 || options.batch_invariant) {
        scores.resize(static_cast<size_t>(ctx));
        for (int64_t t = t0; t < t0 + nq; ++t) {
          attend_one({q + t * row + h * hd, start_pos + t + 1, hd, scale, scores.data(), out + t * row + h * hd}, k,
                     v);
        }
        continue;
      }
      scores.resize(static_cast<size_t>(nq * ctx));
      const float* kf = widen(k, ctx * hd, &k_f32);
      const float* vf = widen(v, ctx * hd, &v_f32);
      // S = Q_blk K^T * scale: [nq, ctx]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nq), static_cast<int>(ctx), hd,
                  scale, q + t0 * row + h * hd, static_cast<int>(row), kf, hd, 0.0f, scores.data(),
                  static_cast<int>(ctx));
      for (int64_t i = 0; i < nq; ++i) {
        float* srow = scores.data() + i * ctx;
        const int64_t visible = start_pos + t0 + i + 1;
        softmax(srow, visible);
        std::fill(srow + visible, srow + ctx, 0.0f);
      }
      // O_blk = S V: [nq, hd]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nq), hd, static_cast<int>(ctx),
                  1.0f, scores.data(), static_cast<int>(ctx), vf, hd, 0.0f, out + t0 * row + h * hd,
                  static_cast<int>(row));
    }
  }
}

}  // namespace

namespace cpu {

void causal_attention(const CausalAttentionArgs& args, const AttentionShape& s, const KernelOptions& options) {
  switch (args.kv_dtype) {
    case DType::kBF16: causal_attention_typed<detail::Bf16>(args, s, options); return;
    case DType::kF16: causal_attention_typed<detail::F16>(args, s, options); return;
    default: causal_attention_typed<float>(args, s, options); return;
  }
}

}  // namespace cpu
}  // namespace moe
