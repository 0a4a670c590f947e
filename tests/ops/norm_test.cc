// rms_norm: y = x * rsqrt(mean(x^2) + eps) * weight, against hand-computed values.
#include "moe/ops/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace moe {
namespace {

TEST(RmsNormTest, HandCaseEpsZero) {
  // mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5, r = 1/sqrt(7.5) = 0.3651483716701107.
  const float x[4] = {1, 2, 3, 4};
  const float w[4] = {1, 1, 2, 0.5f};
  float y[4];
  rms_norm(TensorView::f32(x, {1, 4}), TensorView::f32(w, {4}), 0.0f, TensorView::f32(y, {1, 4}));
  const double r = 0.3651483716701107;
  EXPECT_NEAR(y[0], 1 * r * 1, 1e-6);    // 0.36514837
  EXPECT_NEAR(y[1], 2 * r * 1, 1e-6);    // 0.73029674
  EXPECT_NEAR(y[2], 3 * r * 2, 1e-6);    // 2.19089023
  EXPECT_NEAR(y[3], 4 * r * 0.5, 1e-6);  // 0.73029674
  EXPECT_NEAR(y[2], 2.1908902300206643, 1e-6);
}

TEST(RmsNormTest, EpsIsAddedInsideTheRoot) {
  // x = [3, 4]: mean(x^2) = 12.5; eps 0.5 -> rsqrt(13).
  const float x[2] = {3, 4};
  const float w[2] = {1, 1};
  float y[2];
  rms_norm(TensorView::f32(x, {1, 2}), TensorView::f32(w, {2}), 0.5f, TensorView::f32(y, {1, 2}));
  EXPECT_NEAR(y[0], 3 / std::sqrt(13.0), 1e-6);
  EXPECT_NEAR(y[1], 4 / std::sqrt(13.0), 1e-6);
  // A zero row stays zero (finite) thanks to eps.
  const float z[2] = {0, 0};
  rms_norm(TensorView::f32(z, {1, 2}), TensorView::f32(w, {2}), 1e-5f, TensorView::f32(y, {1, 2}));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(RmsNormTest, RowsAreIndependentAndInPlaceWorks) {
  // Row 0: [2, 2, 2, 2] -> rms 2 -> [1, 1, 1, 1] * w. Row 1: [0, 0, 0, 8] -> rms 4 -> [0, 0, 0, 2] * w.
  std::vector<float> x = {2, 2, 2, 2, 0, 0, 0, 8};
  const float w[4] = {1, -1, 0.25f, 3};
  std::vector<float> y(8);
  rms_norm(TensorView::f32(x.data(), {2, 4}), TensorView::f32(w, {4}), 0.0f, TensorView::f32(y.data(), {2, 4}));
  const float want[8] = {1, -1, 0.25f, 3, 0, 0, 0, 6};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(y[static_cast<size_t>(i)], want[i]) << i;
  rms_norm(TensorView::f32(x.data(), {2, 4}), TensorView::f32(w, {4}), 0.0f,
           TensorView::f32(x.data(), {2, 4}));  // x and y alias
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(x[static_cast<size_t>(i)], want[i]) << i;
}

TEST(RmsNormTest, MatchesNaiveDoubleOnRandomRows) {
  const int64_t m = 5, n = 77;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> x(static_cast<size_t>(m * n)), w(static_cast<size_t>(n)), y(x.size());
  for (auto& v : x) v = dist(rng);
  for (auto& v : w) v = dist(rng);
  const float eps = 1e-5f;
  rms_norm(TensorView::f32(x.data(), {m, n}), TensorView::f32(w.data(), {n}), eps, TensorView::f32(y.data(), {m, n}));
  for (int64_t t = 0; t < m; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[static_cast<size_t>(t * n + i)]) * x[static_cast<size_t>(t * n + i)];
    const double r = 1.0 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; ++i) {
      const size_t j = static_cast<size_t>(t * n + i);
      const double want = x[j] * r * w[static_cast<size_t>(i)];
      EXPECT_NEAR(y[j], want, 1e-5 * std::fabs(want) + 1e-6) << t << "," << i;
    }
  }
}

}  // namespace
}  // namespace moe
