// RoPE in HF's rotate_half layout: dimension i pairs with i + head_dim/2 and rotates by
// pos * theta^(-2i/head_dim).
#include "moe/ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace moe {
namespace {

TEST(RopeTest, PositionZeroIsIdentity) {
  RopeTable rope(8, 10000.0, 4);
  std::vector<float> x = {0.5f, -1.25f, 3.0f, 7.0f, -2.0f, 0.125f, 1e-3f, -9.5f,   // head 0
                          1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};        // head 1
  const std::vector<float> orig = x;
  rope.apply(x.data(), 1, 16, 2, 0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], orig[i]) << i;
}

TEST(RopeTest, HeadDim4Position1ByHand) {
  // head_dim 4, theta 1e4: inv_freq = [1e4^0, 1e4^(-2/4)] = [1, 0.01]. At position 1
  // the angles are [1, 0.01]; pairs are (0, 2) and (1, 3).
  RopeTable rope(4, 10000.0, 2);
  const float x0 = 1, x1 = 2, x2 = 3, x3 = 4;
  float x[4] = {x0, x1, x2, x3};
  rope.apply(x, 1, 4, 1, 1);
  const double c1 = std::cos(1.0), s1 = std::sin(1.0);    // 0.5403023, 0.8414710
  const double c2 = std::cos(0.01), s2 = std::sin(0.01);  // 0.9999500, 0.0099998
  EXPECT_NEAR(x[0], x0 * c1 - x2 * s1, 1e-6);  // 1*0.5403 - 3*0.8415 = -1.9841107
  EXPECT_NEAR(x[2], x2 * c1 + x0 * s1, 1e-6);  // 3*0.5403 + 1*0.8415 =  2.4623779
  EXPECT_NEAR(x[1], x1 * c2 - x3 * s2, 1e-6);  // 2*0.99995 - 4*0.0099998 = 1.9599007
  EXPECT_NEAR(x[3], x3 * c2 + x1 * s2, 1e-6);  // 4*0.99995 + 2*0.0099998 = 4.0197996
  EXPECT_NEAR(x[0], -1.9841106, 1e-5);
  EXPECT_NEAR(x[1], 1.9599007, 1e-5);
  EXPECT_NEAR(x[2], 2.4623779, 1e-5);
  EXPECT_NEAR(x[3], 4.0197996, 1e-5);
}

// Independent reference in double for any head_dim / position.
void naive_rope(std::vector<double>& v, int head_dim, double theta, int64_t pos) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * i / head_dim);
    const double a = v[static_cast<size_t>(i)], b = v[static_cast<size_t>(i + half)];
    const double ang = static_cast<double>(pos) * inv_freq;
    v[static_cast<size_t>(i)] = a * std::cos(ang) - b * std::sin(ang);
    v[static_cast<size_t>(i + half)] = b * std::cos(ang) + a * std::sin(ang);
  }
}

TEST(RopeTest, ManyTokensHeadsStrideAndStartPos) {
  // 3 tokens at positions 5, 6, 7; 2 heads of 8 dims, rows padded to stride 20 (the
  // padding must be left alone).
  const int hd = 8, heads = 2;
  const int64_t stride = 20, m = 3, start = 5;
  const double theta = 1e6;
  RopeTable rope(hd, theta, 16);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(m * stride));
  for (auto& v : x) v = dist(rng);
  const std::vector<float> orig = x;
  rope.apply(x.data(), m, stride, heads, start);
  for (int64_t t = 0; t < m; ++t) {
    for (int h = 0; h < heads; ++h) {
      std::vector<double> v(hd);
      for (int i = 0; i < hd; ++i) v[static_cast<size_t>(i)] = orig[static_cast<size_t>(t * stride + h * hd + i)];
      naive_rope(v, hd, theta, start + t);
      for (int i = 0; i < hd; ++i) {
        EXPECT_NEAR(x[static_cast<size_t>(t * stride + h * hd + i)], v[static_cast<size_t>(i)], 1e-5)
            << "t=" << t << " h=" << h << " i=" << i;
      }
    }
    for (int64_t j = heads * hd; j < stride; ++j) {
      EXPECT_EQ(x[static_cast<size_t>(t * stride + j)], orig[static_cast<size_t>(t * stride + j)]) << "padding " << j;
    }
  }
}

TEST(RopeTest, PreservesNormAndComposesWithStartPos) {
  const int hd = 16;
  RopeTable rope(hd, 10000.0, 64);
  std::vector<float> a(hd), b;
  for (int i = 0; i < hd; ++i) a[static_cast<size_t>(i)] = static_cast<float>(i) - 7.5f;
  b = a;
  double n0 = 0;
  for (float v : a) n0 += static_cast<double>(v) * v;
  // Applying at position 40 in one go vs. as the second of two tokens starting at 39.
  rope.apply(a.data(), 1, hd, 1, 40);
  std::vector<float> two(2 * hd);
  std::copy(b.begin(), b.end(), two.begin() + hd);
  rope.apply(two.data(), 2, hd, 1, 39);
  double n1 = 0;
  for (int i = 0; i < hd; ++i) {
    EXPECT_EQ(a[static_cast<size_t>(i)], two[static_cast<size_t>(hd + i)]) << i;
    n1 += static_cast<double>(a[static_cast<size_t>(i)]) * a[static_cast<size_t>(i)];
  }
  EXPECT_NEAR(n1, n0, 1e-4 * n0);
  EXPECT_EQ(rope.max_positions(), 64);
}


// The tensor entry ([m, heads, head_dim]) equals the raw kernel bit for bit.
TEST(RopeTensorTest, EntryMatchesRawKernel) {
  const int hd = 8, heads = 3;
  const int64_t m = 4;
  RopeTable rope(hd, 10000.0, 16);
  std::vector<float> a(static_cast<size_t>(m * heads * hd));
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * static_cast<float>(i) - 3.0f;
  std::vector<float> b = a;
  rope.apply(a.data(), m, heads * hd, heads, 5);
  rope.apply(TensorView::f32(b.data(), {m, heads, hd}), 5);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
}

TEST(RopeTensorDeathTest, WrongHeadDimOrPastTheTableIsAProgrammingError) {
  RopeTable rope(8, 10000.0, 4);
  std::vector<float> x(64);
  EXPECT_DEATH(rope.apply(TensorView::f32(x.data(), {2, 2, 16}), 0), "");
  EXPECT_DEATH(rope.apply(TensorView::f32(x.data(), {2, 4, 8}), 3), "");
}

}  // namespace
}  // namespace moe
