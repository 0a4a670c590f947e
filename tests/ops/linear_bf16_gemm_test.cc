// KernelOptions::bf16_gemm (`--matmul-precision medium`): prefill GEMMs on bf16 weights
// round x to bf16 and run oneDNN's matmul (ops/linear_bf16_gemm.h). Checked against a
// naive double-precision reference on x rounded to bf16 by the scalar round-to-nearest-
// even of tensor/dtype.h (not the kernels' vcvtneps2bf16), within 1e-5 * sum |w x| — a
// bound the f32 path misses, since rounding x moves a result by up to 2^-9 * sum |w x|
// (so the test fails if the option were ignored). Also: bitwise the same for 1, 2 and 3
// threads; decode (m <= kGemvMaxTokens) and f32/f16 weights untouched by the option.
// Skipped by name on a CPU without AVX512_BF16.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "moe/ops/linear.h"
#include "ops/linear_ref.h"

namespace moe {
namespace {

using testref::kSentinel;

constexpr KernelOptions kMedium{false, KernelIsa::kAvx512Bf16, true};
constexpr KernelOptions kHighest{false, KernelIsa::kAvx512Bf16, false};

class LinearBf16GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_supports(KernelIsa::kAvx512Bf16)) {
      GTEST_SKIP() << "the bf16 GEMM needs AVX512_BF16, which this CPU lacks: skipped";
    }
  }
};

std::vector<float> rounded_to_bf16(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

TEST_F(LinearBf16GemmTest, MatchesDoubleReferenceOnRoundedActivations) {
  const struct {
    int64_t n, k;
  } shapes[] = {{7, 40}, {13, 37}, {67, 100}, {300, 512}, {700, 1024}};
  for (const auto& s : shapes) {
    const testref::TestWeight w = testref::make_weight(DType::kBF16, s.n, s.k, static_cast<uint32_t>(s.n + s.k));
    for (int64_t m : {5, 17, 130}) {
      SCOPED_TRACE("n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " m=" + std::to_string(m));
      const std::vector<float> x = testref::make_input(m, s.k, static_cast<uint32_t>(3 * m + s.k));
      std::vector<double> ref, scale;
      testref::naive_linear(rounded_to_bf16(x), m, w.values, s.n, s.k, &ref, &scale);
      std::vector<double> tol(scale.size());
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = 1e-5 * scale[i];
      std::vector<float> y(static_cast<size_t>(m * s.n) + 8, kSentinel);
      linear(x.data(), m, w.view, y.data(), kMedium);
      testref::expect_within(y, ref, tol, "medium");
    }
  }
  // The f32 path is not within that bound of the rounded reference: the check above sees
  // which path ran.
  const int64_t m = 64, n = 256, k = 512;
  const testref::TestWeight w = testref::make_weight(DType::kBF16, n, k, 3);
  const std::vector<float> x = testref::make_input(m, k, 4);
  std::vector<double> ref, scale;
  testref::naive_linear(rounded_to_bf16(x), m, w.values, n, k, &ref, &scale);
  std::vector<float> y(static_cast<size_t>(m * n));
  linear(x.data(), m, w.view, y.data(), kHighest);
  int outside = 0;
  for (size_t i = 0; i < ref.size(); ++i) outside += std::fabs(y[i] - ref[i]) > 1e-5 * scale[i];
  EXPECT_GT(outside, static_cast<int>(ref.size() / 2));
}

TEST_F(LinearBf16GemmTest, BitwiseIndependentOfThreadCount) {
  const int saved = omp_get_max_threads();
  const testref::TestWeight w = testref::make_weight(DType::kBF16, 2000, 512, 5);
  for (int64_t m : {9, 130}) {
    const std::vector<float> x = testref::make_input(m, 512, static_cast<uint32_t>(m));
    std::vector<std::vector<float>> ys;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      ys.emplace_back(static_cast<size_t>(m * 2000));
      linear(x.data(), m, w.view, ys.back().data(), kMedium);
    }
    for (size_t i = 0; i < ys[0].size(); ++i) {
      ASSERT_EQ(ys[0][i], ys[1][i]) << "m=" << m << ": 2 threads differ at " << i;
      ASSERT_EQ(ys[0][i], ys[2][i]) << "m=" << m << ": 3 threads differ at " << i;
    }
  }
  omp_set_num_threads(saved);
}

TEST_F(LinearBf16GemmTest, DecodeAndOtherDtypesUnchanged) {
  const int64_t n = 150, k = 96;
  for (DType dt : {DType::kBF16, DType::kF32, DType::kF16}) {
    const testref::TestWeight w = testref::make_weight(dt, n, k, 9);
    for (int64_t m : {1, 4, 20}) {
      if (dt == DType::kBF16 && m > kGemvMaxTokens) continue;  // the GEMM this option changes
      SCOPED_TRACE(std::string(dtype_name(dt)) + " m=" + std::to_string(m));
      const std::vector<float> x = testref::make_input(m, k, 10);
      std::vector<float> a(static_cast<size_t>(m * n)), b(a.size());
      linear(x.data(), m, w.view, a.data(), kMedium);
      linear(x.data(), m, w.view, b.data(), kHighest);
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
    }
  }
}

}  // namespace
}  // namespace moe
