// KVCache::write places token t, head h, dim d at [layer][h][start_pos + t][d].
#include "moe/transformer/kv_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace moe {
namespace {

constexpr int kLayers = 2, kKvHeads = 3, kHeadDim = 4;
constexpr int64_t kCapacity = 5;

float key_value(int64_t t, int h, int d) { return static_cast<float>(1000 * (t + 1) + 100 * h + d); }

TEST(KVCacheTest, Sizes) {
  KVCache cache(kLayers, kKvHeads, kHeadDim, kCapacity);
  EXPECT_EQ(cache.capacity(), kCapacity);
  EXPECT_EQ(cache.bytes(), 2u * kLayers * kKvHeads * kCapacity * kHeadDim * sizeof(float));
  EXPECT_EQ(cache.k(1) - cache.k(0), kKvHeads * kCapacity * kHeadDim);
  EXPECT_EQ(cache.v(1) - cache.v(0), kKvHeads * kCapacity * kHeadDim);
}

TEST(KVCacheTest, WritePlacesHeadPosDim) {
  KVCache cache(kLayers, kKvHeads, kHeadDim, kCapacity);
  const int64_t m = 2, start = 2;
  std::vector<float> keys(static_cast<size_t>(m * kKvHeads * kHeadDim)), values(keys.size());
  for (int64_t t = 0; t < m; ++t) {
    for (int h = 0; h < kKvHeads; ++h) {
      for (int d = 0; d < kHeadDim; ++d) {
        const size_t i = static_cast<size_t>(t * kKvHeads * kHeadDim + h * kHeadDim + d);
        keys[i] = key_value(t, h, d);
        values[i] = -key_value(t, h, d);
      }
    }
  }
  cache.write(1, start, TensorView::f32(keys.data(), {m, kKvHeads * kHeadDim}),
              TensorView::f32(values.data(), {m, kKvHeads * kHeadDim}));

  const float* k = cache.k(1);
  const float* v = cache.v(1);
  for (int h = 0; h < kKvHeads; ++h) {
    for (int64_t pos = 0; pos < kCapacity; ++pos) {
      for (int d = 0; d < kHeadDim; ++d) {
        const size_t at = static_cast<size_t>((h * kCapacity + pos) * kHeadDim + d);
        const bool written = pos >= start && pos < start + m;
        const float want = written ? key_value(pos - start, h, d) : 0.0f;
        EXPECT_EQ(k[at], want) << "k h=" << h << " pos=" << pos << " d=" << d;
        EXPECT_EQ(v[at], -want) << "v h=" << h << " pos=" << pos << " d=" << d;
      }
    }
  }
  // Layer 0 untouched.
  for (int64_t i = 0; i < kKvHeads * kCapacity * kHeadDim; ++i) {
    EXPECT_EQ(cache.k(0)[i], 0.0f) << i;
    EXPECT_EQ(cache.v(0)[i], 0.0f) << i;
  }

  // A later single-token write at the last slot keeps earlier positions.
  std::vector<float> k1(static_cast<size_t>(kKvHeads * kHeadDim)), v1(k1.size());
  for (int h = 0; h < kKvHeads; ++h) {
    for (int d = 0; d < kHeadDim; ++d) {
      k1[static_cast<size_t>(h * kHeadDim + d)] = 0.5f + static_cast<float>(h * kHeadDim + d);
      v1[static_cast<size_t>(h * kHeadDim + d)] = -0.5f - static_cast<float>(h * kHeadDim + d);
    }
  }
  cache.write(1, kCapacity - 1, TensorView::f32(k1.data(), {1, kKvHeads * kHeadDim}),
              TensorView::f32(v1.data(), {1, kKvHeads * kHeadDim}));
  for (int h = 0; h < kKvHeads; ++h) {
    for (int d = 0; d < kHeadDim; ++d) {
      EXPECT_EQ(k[(h * kCapacity + kCapacity - 1) * kHeadDim + d], 0.5f + static_cast<float>(h * kHeadDim + d));
      EXPECT_EQ(v[(h * kCapacity + kCapacity - 1) * kHeadDim + d], -0.5f - static_cast<float>(h * kHeadDim + d));
      EXPECT_EQ(k[(h * kCapacity + start) * kHeadDim + d], key_value(0, h, d));
      EXPECT_EQ(k[(h * kCapacity + start + 1) * kHeadDim + d], key_value(1, h, d));
    }
  }
}

}  // namespace
}  // namespace moe
