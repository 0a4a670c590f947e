// silu_mul and softmax against hand-computed values.
#include "moe/ops/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace moe {
namespace {

TEST(SiluMulTest, HandValues) {
  // silu(x) = x / (1 + e^-x): silu(0) = 0, silu(1) = 0.7310585786, silu(-1) = -0.2689414214,
  // silu(2) = 1.7615941560.
  const float gate[5] = {0, 1, -1, 2, 1};
  const float up[5] = {5, 2, 3, -0.5f, 0};
  float out[5];
  silu_mul(gate, up, 5, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 1.4621171573, 1e-6);   // 0.7310585786 * 2
  EXPECT_NEAR(out[2], -0.8068242641, 1e-6);  // -0.2689414214 * 3
  EXPECT_NEAR(out[3], -0.8807970780, 1e-6);  // 1.7615941560 * -0.5
  EXPECT_EQ(out[4], 0.0f);
}

TEST(SiluMulTest, ExtremesAndAliasing) {
  std::vector<float> gate = {100.0f, -100.0f, 1000.0f, -1000.0f, 30.0f};
  const std::vector<float> up = {2.0f, 2.0f, 1.0f, 1.0f, -1.0f};
  std::vector<float> out(5);
  silu_mul(gate.data(), up.data(), 5, out.data());
  EXPECT_NEAR(out[0], 200.0f, 1e-3);
  EXPECT_NEAR(out[1], 0.0f, 1e-30);  // -100 * e^-100 * 2 ~ -7e-42
  EXPECT_NEAR(out[2], 1000.0f, 1e-3);
  EXPECT_EQ(out[3], 0.0f);  // -1000 / inf = -0
  EXPECT_NEAR(out[4], -30.0f, 1e-4);
  for (float v : out) EXPECT_TRUE(std::isfinite(v));
  // out aliasing gate: same result.
  silu_mul(gate.data(), up.data(), 5, gate.data());
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(gate[i], out[i]) << i;
}

TEST(SoftmaxTest, SumsToOneAndMatchesExpRatios) {
  std::vector<float> x = {1, 2, 3, 0.5f};
  softmax(x.data(), 4);
  double sum = 0;
  for (float v : x) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  // e^1 + e^2 + e^3 + e^0.5 = 2.7182818 + 7.3890561 + 20.0855369 + 1.6487213 = 31.8415961
  EXPECT_NEAR(x[0], 0.0853689, 1e-6);
  EXPECT_NEAR(x[1], 0.2320567, 1e-6);
  EXPECT_NEAR(x[2], 0.6307955, 1e-6);
  EXPECT_NEAR(x[3], 0.0517790, 1e-6);
  EXPECT_NEAR(x[1] / x[0], std::exp(1.0), 1e-5);
  EXPECT_NEAR(x[2] / x[0], std::exp(2.0), 1e-5);
  EXPECT_NEAR(x[0] / x[3], std::exp(0.5), 1e-5);
}

TEST(SoftmaxTest, LargeInputsDoNotOverflow) {
  std::vector<float> big = {1000, 1001, 1002};
  std::vector<float> small = {0, 1, 2};
  softmax(big.data(), 3);
  softmax(small.data(), 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::isfinite(big[i])) << i;
    EXPECT_NEAR(big[i], small[i], 1e-6) << i;
  }
  // [0.0900306, 0.2447285, 0.6652410]
  EXPECT_NEAR(small[0], 0.0900306, 1e-6);
  EXPECT_NEAR(small[2], 0.6652410, 1e-6);
  std::vector<float> spread = {-1e4f, 0, 88.0f, 89.0f};
  softmax(spread.data(), 4);
  EXPECT_EQ(spread[0], 0.0f);
  EXPECT_NEAR(spread[2], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(spread[3], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

TEST(SoftmaxTest, SingleAndUniform) {
  float one = -42.0f;
  softmax(&one, 1);
  EXPECT_EQ(one, 1.0f);
  std::vector<float> u(7, 3.5f);
  softmax(u.data(), 7);
  for (float v : u) EXPECT_NEAR(v, 1.0 / 7.0, 1e-7);
}


// The tensor entries run the same kernels: identical bits.
TEST(ActivationTensorTest, EntriesMatchRawKernels) {
  std::vector<float> gate = {-3, -0.5f, 0, 0.25f, 2, 7}, up = {1, 2, -1, 4, 0.5f, -2};
  std::vector<float> raw(6), viewed(6);
  silu_mul(gate.data(), up.data(), 6, raw.data());
  silu_mul(TensorView::f32(gate.data(), {2, 3}), TensorView::f32(up.data(), {2, 3}), TensorView::f32(viewed.data(), {2, 3}));
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(raw[i], viewed[i]) << i;
  std::vector<float> rows = {1, 2, 3, -1, 0, 5}, one = rows;
  softmax(TensorView::f32(rows.data(), {2, 3}));
  softmax(one.data(), 3);
  softmax(one.data() + 3, 3);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(rows[i], one[i]) << i;
}

TEST(ActivationTensorDeathTest, ShapeMismatchIsAProgrammingError) {
  std::vector<float> a(6), b(6);
  EXPECT_DEATH(silu_mul(TensorView::f32(a.data(), {2, 3}), TensorView::f32(b.data(), {3, 2}),
                        TensorView::f32(a.data(), {2, 3})),
               "");
}

}  // namespace
}  // namespace moe
