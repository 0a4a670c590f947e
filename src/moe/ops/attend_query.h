// One query row against one KV head: the inner loop shared by the contiguous-cache
// attention (attention.cc) and the paged one (paged_attention.cc), so both give bitwise
// the same result for the same keys and values. Keys and values are f32, bf16 or f16
// (the KV cache's dtype, --kv-dtype): 16-bit rows are widened to f32 in registers and
// the arithmetic is the f32 one. Internal to src/moe/ops.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "moe/ops/activation_cpu.h"
#include "moe/tensor/dtype.h"

namespace moe::detail {

// 16-bit cache elements, distinguished by type so that attend_query is instantiated
// once per KV dtype.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

// 8 consecutive elements as f32.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const Bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8(const F16* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline float load1(const float* p) { return *p; }
inline float load1(const Bf16* p) { return bf16_to_f32(p->bits); }
inline float load1(const F16* p) { return f16_to_f32(p->bits); }

inline float hsum8(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// One query: q [hd] over positions [0, ctx); scores: scratch [ctx]; out: [vd].
struct QueryTask {
  const float* q;
  int64_t ctx;
  int hd;
  float scale;
  float* scores;
  float* out;
  int vd = 0;  // value width; 0 = hd (MLA: keys and values differ in width)
};

// row_k(p) / row_v(p): the key [hd] / value [vd] of position p, p < ctx, as a pointer
// to float, Bf16 or F16 elements.
// out = softmax(q K^T * scale) V. AVX2 when hd and vd are multiples of 8.
template <typename KeyAt, typename ValueAt>
inline void attend_query(const QueryTask& task, KeyAt row_k, ValueAt row_v) {
  const float* q = task.q;
  const int64_t ctx = task.ctx;
  const int hd = task.hd;
  const float scale = task.scale;
  float* scores = task.scores;
  float* out = task.out;
  const int vd = task.vd > 0 ? task.vd : hd;
  const bool vec = hd % 8 == 0;
  const bool vec_v = vd % 8 == 0;
  for (int64_t p = 0; p < ctx; ++p) {
    const auto* kp = row_k(p);
    float s = 0;
    if (vec) {
      __m256 acc = _mm256_setzero_ps();
      for (int i = 0; i < hd; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(kp + i), acc);
      s = hsum8(acc);
    } else {
      for (int i = 0; i < hd; ++i) s += q[i] * load1(kp + i);
    }
    scores[p] = s * scale;
  }
  softmax(scores, ctx);
  std::fill(out, out + vd, 0.0f);
  for (int64_t p = 0; p < ctx; ++p) {
    const float w = scores[p];
    const auto* vp = row_v(p);
    if (vec_v) {
      const __m256 wv = _mm256_set1_ps(w);
      for (int i = 0; i < vd; i += 8) {
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, load8(vp + i), _mm256_loadu_ps(out + i)));
      }
    } else {
      for (int i = 0; i < vd; ++i) out[i] += w * load1(vp + i);
    }
  }
}

}  // namespace moe::detail
