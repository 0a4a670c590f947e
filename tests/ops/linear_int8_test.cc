// int8 weights ("--weights int8"): the load-time quantiser (model/int8_quant.h) and the
// int8 GEMV kernels (ops/linear_kernels.h: AVX2 maddubs, AVX512_VNNI vpdpbusd).
//
// The kernel quantises x to q8 per 32-block, so it is checked against the double sum
// of the dequantised weights times the *unquantised* x, with a rigorous bound: q8 moves
// each x by at most d_x / 2 (d_x = max |x| / 127 over its block, computed here), so
// |y - ref| <= sum_b d_x,b / 2 * sum_(j in b) |w_j| (+ f32 rounding, 1e-5 sum |w x|).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "moe/model/int8_quant.h"
#include "moe/ops/linear.h"
#include "ops/linear_ref.h"

namespace moe {
namespace {

using testref::kSentinel;

struct Quantised {
  testref::TestWeight source;
  std::vector<uint8_t> buffer;
  Weight2D w;
  std::vector<double> values;  // dequantised: code * scale, exact in double
};

Quantised make_int8(int64_t n, int64_t k, uint32_t seed) {
  Quantised q;
  q.source = testref::make_weight(DType::kBF16, n, k, seed);
  q.w = quantize_to_int8(q.source.view, &q.buffer);
  q.values.resize(static_cast<size_t>(n * k));
  const int8_t* codes = static_cast<const int8_t*>(q.w.data);
  const float* scales = static_cast<const float*>(q.w.scale);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      q.values[static_cast<size_t>(r * k + c)] = static_cast<double>(codes[r * k + c]) * scales[r * (k / 32) + c / 32];
    }
  return q;
}

// The bound described at the top, per output element.
std::vector<double> q8_bound(const std::vector<float>& x, int64_t m, const Quantised& q, const std::vector<double>& scale) {
  const int64_t n = q.w.rows, k = q.w.cols;
  std::vector<double> tol(static_cast<size_t>(m * n));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double b = 0;
      for (int64_t j0 = 0; j0 < k; j0 += 32) {
        double amax = 0, wsum = 0;
        for (int64_t j = j0; j < j0 + 32; ++j) {
          amax = std::max(amax, std::fabs(static_cast<double>(x[static_cast<size_t>(t * k + j)])));
          wsum += std::fabs(q.values[static_cast<size_t>(r * k + j)]);
        }
        b += amax / 127.0 / 2.0 * wsum * (1 + 1e-6);
      }
      tol[static_cast<size_t>(t * n + r)] = b + 1e-5 * scale[static_cast<size_t>(t * n + r)];
    }
  return tol;
}

TEST(Int8QuantTest, CodesAndScalesFollowTheFormula) {
  const Quantised q = make_int8(37, 96, 1);
  ASSERT_EQ(q.w.dtype, DType::kI8);
  ASSERT_EQ(q.w.block_rows, 1);
  ASSERT_EQ(q.w.block_cols, 32);
  ASSERT_EQ(q.w.scale_dtype, DType::kF32);
  EXPECT_EQ(q.w.bytes(), static_cast<size_t>(37 * 96 + 37 * 3 * 4));
  const int8_t* codes = static_cast<const int8_t*>(q.w.data);
  const float* scales = static_cast<const float*>(q.w.scale);
  for (int64_t r = 0; r < 37; ++r)
    for (int64_t b = 0; b < 3; ++b) {
      double amax = 0;
      int max_code = 0;
      for (int64_t c = b * 32; c < b * 32 + 32; ++c) {
        amax = std::max(amax, std::fabs(q.source.values[static_cast<size_t>(r * 96 + c)]));
        max_code = std::max(max_code, std::abs(static_cast<int>(codes[r * 96 + c])));
      }
      const double d = scales[r * 3 + b];
      EXPECT_NEAR(d, amax / 127.0, 1e-7 * amax) << r << "," << b;
      if (amax > 0) {
        EXPECT_EQ(max_code, 127);
      }
      for (int64_t c = b * 32; c < b * 32 + 32; ++c) {
        const double err = std::fabs(q.source.values[static_cast<size_t>(r * 96 + c)] - codes[r * 96 + c] * d);
        EXPECT_LE(err, d / 2 * (1 + 1e-5)) << r << "," << c;
      }
    }
}

TEST(Int8QuantTest, HandBlock) {
  // One row, one block: w = [1.27, -0.635, 0, ...]: d = 0.01, codes 127, -64 (-63.5 to even), 0.
  std::vector<float> wf(32, 0.0f);
  wf[0] = 1.27f;
  wf[1] = -0.635f;
  const Weight2D src{wf.data(), DType::kF32, 1, 32};
  std::vector<uint8_t> buf;
  const Weight2D w = quantize_to_int8(src, &buf);
  const int8_t* codes = static_cast<const int8_t*>(w.data);
  EXPECT_FLOAT_EQ(*static_cast<const float*>(w.scale), 0.01f);
  EXPECT_EQ(codes[0], 127);
  EXPECT_TRUE(codes[1] == -63 || codes[1] == -64) << int{codes[1]};  // -63.5 up to float rounding
  EXPECT_EQ(codes[2], 0);
  // An all-zero block: scale 0, codes 0, and the GEMV gives exactly 0.
  std::vector<float> zeros(64, 0.0f);
  const Weight2D zw = quantize_to_int8(Weight2D{zeros.data(), DType::kF32, 2, 32}, &buf);
  float y[2] = {1, 1};
  const std::vector<float> x(32, 1.0f);
  linear(x.data(), 1, zw, y, KernelOptions{});
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(Int8QuantTest, OnlyWholeBlocksAreQuantised) {
  const testref::TestWeight w = testref::make_weight(DType::kBF16, 4, 40, 2);
  EXPECT_FALSE(can_quantize_int8(w.view));  // 40 % 32 != 0
  EXPECT_FALSE(can_quantize_int8(Weight2D{}));
  const testref::TestWeight ok = testref::make_weight(DType::kBF16, 4, 64, 2);
  EXPECT_TRUE(can_quantize_int8(ok.view));
  // An expert whose w2 cannot be quantised keeps it, copied into the new buffer.
  const testref::TestWeight w1 = testref::make_weight(DType::kBF16, 8, 64, 3), w2 = testref::make_weight(DType::kBF16, 64, 8, 4),
                            w3 = testref::make_weight(DType::kBF16, 8, 64, 5);
  ExpertWeights e{w1.view, w2.view, w3.view, true};
  std::vector<uint8_t> buf;
  ASSERT_TRUE(quantize_expert_to_int8(&e, &buf));
  EXPECT_EQ(e.w1.dtype, DType::kI8);
  EXPECT_EQ(e.w2.dtype, DType::kBF16);
  EXPECT_EQ(e.w3.dtype, DType::kI8);
  EXPECT_EQ(buf.size(), e.bytes());
  EXPECT_EQ(e.w1.data, buf.data());  // w1 | w1 scales | w2 | w3 | w3 scales
  EXPECT_EQ(static_cast<const uint8_t*>(e.w2.data), buf.data() + e.w1.bytes());
  EXPECT_EQ(std::memcmp(e.w2.data, w2.storage.data(), w2.storage.size()), 0);
  std::vector<uint8_t> single;
  const Weight2D w3q = quantize_to_int8(w3.view, &single);
  EXPECT_EQ(std::memcmp(e.w3.data, w3q.data, w3q.bytes()), 0);
}

class Int8PathTest : public ::testing::TestWithParam<KernelIsa> {
 protected:
  void SetUp() override {
    if (!cpu_supports(GetParam())) GTEST_SKIP() << "kernel path " << kernel_isa_name(GetParam()) << " not supported: skipped";
  }
};

TEST_P(Int8PathTest, MatchesDequantisedReferenceWithinQ8Bound) {
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{1, 32}, {7, 64}, {67, 160}, {300, 512}}) {
    const Quantised q = make_int8(n, k, static_cast<uint32_t>(n + k));
    for (int64_t m : {1, 2, 3, 4, 5, 17, 130}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " m=" + std::to_string(m));
      const std::vector<float> x = testref::make_input(m, k, static_cast<uint32_t>(m * 3 + k));
      std::vector<double> ref, scale;
      testref::naive_linear(x, m, q.values, n, k, &ref, &scale);
      const std::vector<double> tol = q8_bound(x, m, q, scale);
      for (bool invariant : {false, true}) {
        std::vector<float> y(static_cast<size_t>(m * n) + 8, kSentinel);
        linear(x.data(), m, q.w, y.data(), KernelOptions{invariant, GetParam()});
        testref::expect_within(y, ref, tol, "int8 gemv");
      }
      // The sgemm path (linear_gemm: dequantised row blocks, x unquantised): f32 accuracy.
      std::vector<float> yg(static_cast<size_t>(m * n) + 8, kSentinel);
      linear_gemm(x.data(), m, q.w, yg.data());
      std::vector<double> tol_f32(scale.size());
      for (size_t i = 0; i < scale.size(); ++i) tol_f32[i] = 1e-5 * scale[i];
      testref::expect_within(yg, ref, tol_f32, "int8 via sgemm");
    }
  }
}

TEST_P(Int8PathTest, BitwiseIndependentOfThreadsAndM) {
  const int saved = omp_get_max_threads();
  const Quantised q = make_int8(2000, 256, 9);
  const int64_t m = 9;
  const std::vector<float> x = testref::make_input(m, 256, 10);
  std::vector<std::vector<float>> ys;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    ys.emplace_back(static_cast<size_t>(m * 2000));
    linear(x.data(), m, q.w, ys.back().data(), KernelOptions{true, GetParam()});  // batch invariant: GEMV for m = 9
  }
  omp_set_num_threads(saved);
  for (size_t i = 0; i < ys[0].size(); ++i) {
    ASSERT_EQ(ys[0][i], ys[1][i]) << i;
    ASSERT_EQ(ys[0][i], ys[2][i]) << i;
  }
  for (int64_t t = 0; t < m; t += 4) {
    std::vector<float> one(2000);
    linear(x.data() + t * 256, 1, q.w, one.data(), KernelOptions{true, GetParam()});
    for (int64_t r = 0; r < 2000; ++r) ASSERT_EQ(ys[0][static_cast<size_t>(t * 2000 + r)], one[static_cast<size_t>(r)]);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Int8PathTest, ::testing::ValuesIn(testref::kAllIsas),
                         [](const ::testing::TestParamInfo<KernelIsa>& i) {
                           std::string s = kernel_isa_name(i.param);
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// AVX2's maddubs and VNNI's vpdpbusd form the same integer sums: identical bits.
TEST(Int8PathsTest, Avx2AndVnniAgreeBitwise) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "AVX512_VNNI not on this CPU: the VNNI int8 kernel is skipped";
  const Quantised q = make_int8(130, 320, 11);
  for (int64_t m : {1, 3, 6}) {
    const std::vector<float> x = testref::make_input(m, 320, static_cast<uint32_t>(m));
    std::vector<float> a(static_cast<size_t>(m * 130)), b(a.size());
    linear(x.data(), m, q.w, a.data(), KernelOptions{false, KernelIsa::kAvx2});
    linear(x.data(), m, q.w, b.data(), KernelOptions{false, KernelIsa::kAvx512});
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "m=" << m << " at " << i;
  }
}

}  // namespace
}  // namespace moe
