#include "moe/ops/attention.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <optional>
#include <cmath>
#include <vector>

#include "moe/ops/activation.h"
#include "moe/ops/blas_threads.h"

namespace moe {
namespace {

constexpr int64_t kQueryBlock = 128;  // queries per sgemm block (bounds scratch memory)

inline float hsum8(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// One query row against one KV head (decode path), AVX2 when head_dim % 8 == 0.
void attend_one(const float* q, int64_t ctx, const float* k, const float* v, int hd, float scale,
                float* scores, float* out) {
  const bool vec = hd % 8 == 0;
  for (int64_t p = 0; p < ctx; ++p) {
    const float* kp = k + p * hd;
    float s = 0;
    if (vec) {
      __m256 acc = _mm256_setzero_ps();
      for (int i = 0; i < hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kp + i), acc);
      s = hsum8(acc);
    } else {
      for (int i = 0; i < hd; ++i) s += q[i] * kp[i];
    }
    scores[p] = s * scale;
  }
  softmax(scores, ctx);
  std::fill(out, out + hd, 0.0f);
  for (int64_t p = 0; p < ctx; ++p) {
    const float w = scores[p];
    const float* vp = v + p * hd;
    if (vec) {
      const __m256 wv = _mm256_set1_ps(w);
      for (int i = 0; i < hd; i += 8) {
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(vp + i), _mm256_loadu_ps(out + i)));
      }
    } else {
      for (int i = 0; i < hd; ++i) out[i] += w * vp[i];
    }
  }
}

}  // namespace

void causal_attention(const float* q, int64_t m, int64_t start_pos, const float* k_cache,
                      const float* v_cache, const AttentionShape& s, float* out) {
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
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < work; ++item) {
      const int h = static_cast<int>(item / num_qblocks);
      const int64_t qb = item % num_qblocks;
      const int kvh = h / group;
      const float* k = k_cache + static_cast<int64_t>(kvh) * s.capacity * hd;
      const float* v = v_cache + static_cast<int64_t>(kvh) * s.capacity * hd;
      const int64_t t0 = qb * kQueryBlock;
      const int64_t nq = std::min(kQueryBlock, m - t0);
      const int64_t ctx = start_pos + t0 + nq;  // keys visible to the block's last query
      if (nq <= 2) {
        scores.resize(static_cast<size_t>(ctx));
        for (int64_t t = t0; t < t0 + nq; ++t) {
          attend_one(q + t * row + h * hd, start_pos + t + 1, k, v, hd, scale, scores.data(),
                     out + t * row + h * hd);
        }
        continue;
      }
      scores.resize(static_cast<size_t>(nq * ctx));
      // S = Q_blk K^T * scale: [nq, ctx]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nq), static_cast<int>(ctx), hd,
                  scale, q + t0 * row + h * hd, static_cast<int>(row), k, hd, 0.0f, scores.data(),
                  static_cast<int>(ctx));
      for (int64_t i = 0; i < nq; ++i) {
        float* srow = scores.data() + i * ctx;
        const int64_t visible = start_pos + t0 + i + 1;
        softmax(srow, visible);
        std::fill(srow + visible, srow + ctx, 0.0f);
      }
      // O_blk = S V: [nq, hd]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nq), hd, static_cast<int>(ctx),
                  1.0f, scores.data(), static_cast<int>(ctx), v, hd, 0.0f, out + t0 * row + h * hd,
                  static_cast<int>(row));
    }
  }
}

}  // namespace moe
