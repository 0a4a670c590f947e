// linear / linear_gemv / linear_gemm / dot_row against a naive double-precision loop,
// for F32/BF16/F16 weights, token counts on both sides of kGemvMaxTokens, and shapes
// that leave tails in the 16-wide inner loop (k % 16 != 0) and in the 8-row thread
// split (n % 8 != 0), plus one matrix large enough for the multi-threaded paths.
//
// Weights are j/128 for integer j in [-127, 127]: exactly representable in all three
// dtypes, so the reference knows their values without going through the product's
// conversion functions.
#include "moe/ops/linear.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>
#include <algorithm>

#include "moe/tensor/dtype.h"

namespace moe {
namespace {

struct TestWeight {
  std::vector<uint8_t> storage;
  std::vector<double> values;  // [n, k], exact
  Weight2D view;
};

TestWeight make_weight(DType dt, int64_t n, int64_t k, uint32_t seed) {
  TestWeight tw;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-127, 127);
  tw.values.resize(static_cast<size_t>(n * k));
  tw.storage.resize(static_cast<size_t>(n * k) * dtype_size(dt));
  for (int64_t i = 0; i < n * k; ++i) {
    const float v = static_cast<float>(dist(rng)) / 128.0f;
    tw.values[static_cast<size_t>(i)] = v;
    uint8_t* p = tw.storage.data() + static_cast<size_t>(i) * dtype_size(dt);
    if (dt == DType::kF32) {
      std::memcpy(p, &v, 4);
    } else {
      // Exactly representable, so the narrowing cannot round; the bits are those of the
      // f32 high half (bf16) or sign|exp-15|10-bit mantissa (f16).
      const uint16_t h = dt == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(p, &h, 2);
    }
  }
  tw.view = Weight2D{tw.storage.data(), dt, n, k};
  return tw;
}

std::vector<float> make_input(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = dist(rng);
  return x;
}

// ref[t, r] = sum_i w[r, i] x[t, i] in double, and scale[t, r] = sum_i |w x|.
void naive_linear(const std::vector<float>& x, int64_t m, const TestWeight& w, std::vector<double>* ref,
                  std::vector<double>* scale) {
  const int64_t n = w.view.rows, k = w.view.cols;
  ref->assign(static_cast<size_t>(m * n), 0.0);
  scale->assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < n; ++r) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = w.values[static_cast<size_t>(r * k + i)] * static_cast<double>(x[static_cast<size_t>(t * k + i)]);
        s += p;
        a += std::fabs(p);
      }
      (*ref)[static_cast<size_t>(t * n + r)] = s;
      (*scale)[static_cast<size_t>(t * n + r)] = a;
    }
  }
}

constexpr double kRelTol = 1e-5;
constexpr float kSentinel = 7.77e7f;

void expect_close(const std::vector<float>& y, const std::vector<double>& ref, const std::vector<double>& scale,
                  const std::string& what) {
  ASSERT_GE(y.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = kRelTol * scale[i] + 1e-30;
    if (!(std::fabs(static_cast<double>(y[i]) - ref[i]) <= tol)) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << ": element " << i << " got " << y[i] << " want " << ref[i] << " (tol " << tol << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
  for (size_t i = ref.size(); i < y.size(); ++i) {
    ASSERT_EQ(y[i], kSentinel) << what << ": wrote past the [m, n] output at " << i;
  }
}

struct Shape {
  int64_t n, k;
};

struct LinearCase {
  DType dtype;
  Shape shape;
};

std::string case_name(const ::testing::TestParamInfo<LinearCase>& info) {
  return std::string(dtype_name(info.param.dtype)) + "_n" + std::to_string(info.param.shape.n) + "_k" +
         std::to_string(info.param.shape.k);
}

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, AllPathsMatchNaiveDouble) {
  const auto [dt, shape] = GetParam();
  const TestWeight w = make_weight(dt, shape.n, shape.k, static_cast<uint32_t>(shape.n * 1000 + shape.k));
  for (int64_t m : {1, 2, 3, 4, 5, 17, 130}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    const std::vector<float> x = make_input(m, shape.k, static_cast<uint32_t>(m * 31 + shape.k));
    std::vector<double> ref, scale;
    naive_linear(x, m, w, &ref, &scale);
    const size_t out = static_cast<size_t>(m * shape.n);

    std::vector<float> y(out + 8, kSentinel);
    linear(x.data(), m, w.view, y.data(), KernelOptions{});
    expect_close(y, ref, scale, "linear");

    std::vector<float> yg(out + 8, kSentinel);
    linear_gemm(x.data(), m, w.view, yg.data());
    expect_close(yg, ref, scale, "linear_gemm");

    if (m <= kGemvMaxTokens) {
      std::vector<float> yv(out + 8, kSentinel);
      linear_gemv(x.data(), m, w.view, yv.data());
      expect_close(yv, ref, scale, "linear_gemv");
      // gemv and gemm agree with each other (to twice the tolerance against the reference).
      for (size_t i = 0; i < out; ++i) {
        ASSERT_LE(std::fabs(static_cast<double>(yv[i]) - yg[i]), 2 * kRelTol * scale[i] + 1e-30) << "i=" << i;
      }
      // linear() dispatches small m to the GEMV kernel: identical bits.
      for (size_t i = 0; i < out; ++i) ASSERT_EQ(y[i], yv[i]) << "i=" << i;
    }
  }
}

TEST_P(LinearTest, DotRowMatchesNaive) {
  const auto [dt, shape] = GetParam();
  const TestWeight w = make_weight(dt, shape.n, shape.k, static_cast<uint32_t>(shape.n * 7 + shape.k));
  const std::vector<float> x = make_input(1, shape.k, 99);
  std::vector<double> ref, scale;
  naive_linear(x, 1, w, &ref, &scale);
  for (int64_t r = 0; r < shape.n; ++r) {
    const float got = dot_row(x.data(), w.view, r);
    ASSERT_LE(std::fabs(static_cast<double>(got) - ref[static_cast<size_t>(r)]),
              kRelTol * scale[static_cast<size_t>(r)] + 1e-30)
        << "row " << r;
  }
}

const Shape kShapes[] = {
    {1, 1},     // degenerate
    {5, 3},     // k < 8: scalar tail only
    {7, 40},    // n = 4 + 3 left over from the 4-row GEMV groups; k tail of 8
    {8, 16},    // exactly one 16-wide step
    {13, 37},   // n % 8 != 0, k % 16 != 0
    {16, 64},   //
    {33, 100},  //
    {67, 24},   // one 64-row GEMV block plus 3 rows
    {300, 512}, // 300 KiB (bf16/f16) / 600 KiB (f32) of weights -> multi-threaded GEMV and GEMM
};

std::vector<LinearCase> all_cases() {
  std::vector<LinearCase> out;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Shape& s : kShapes) out.push_back({dt, s});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest, ::testing::ValuesIn(all_cases()), case_name);

// Hand case: W = [[1, 2, 3], [-1, 0.5, 0]], x = [[1, 1, 1], [2, -2, 4]].
TEST(LinearHandTest, SmallMatrix) {
  const float wf[6] = {1, 2, 3, -1, 0.5f, 0};
  const float x[6] = {1, 1, 1, 2, -2, 4};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<uint8_t> storage(6 * dtype_size(dt));
    for (int i = 0; i < 6; ++i) {
      if (dt == DType::kF32) {
        std::memcpy(storage.data() + i * 4, &wf[i], 4);
      } else {
        const uint16_t h = dt == DType::kBF16 ? f32_to_bf16(wf[i]) : f32_to_f16(wf[i]);
        std::memcpy(storage.data() + i * 2, &h, 2);
      }
    }
    const Weight2D w{storage.data(), dt, 2, 3};
    float y[4];
    linear_gemv(x, 2, w, y);
    EXPECT_EQ(y[0], 6.0f);    // 1 + 2 + 3
    EXPECT_EQ(y[1], -0.5f);   // -1 + 0.5
    EXPECT_EQ(y[2], 10.0f);   // 2 - 4 + 12
    EXPECT_EQ(y[3], -3.0f);   // -2 - 1
    float yg[4];
    linear_gemm(x, 2, w, yg);
    EXPECT_EQ(yg[0], 6.0f);
    EXPECT_EQ(yg[1], -0.5f);
    EXPECT_EQ(yg[2], 10.0f);
    EXPECT_EQ(yg[3], -3.0f);
    EXPECT_EQ(dot_row(x + 3, w, 0), 10.0f);
    EXPECT_EQ(dot_row(x + 3, w, 1), -3.0f);
  }
}

TEST(LinearHandTest, ZeroTokensWritesNothing) {
  const TestWeight w = make_weight(DType::kBF16, 4, 8, 1);
  const std::vector<float> x = make_input(1, 8, 2);
  float y[4] = {kSentinel, kSentinel, kSentinel, kSentinel};
  linear(x.data(), 0, w.view, y, KernelOptions{});
  for (float v : y) EXPECT_EQ(v, kSentinel);
}

// Runs linear() on the same inputs with 1, 2 and 3 OpenMP threads; every result must
// match the reference. Returns the three outputs.
std::vector<std::vector<float>> run_with_threads(const TestWeight& w, int64_t m, const std::vector<float>& x) {
  const int saved = omp_get_max_threads();
  std::vector<double> ref, scale;
  naive_linear(x, m, w, &ref, &scale);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> y(static_cast<size_t>(m * w.view.rows) + 8, kSentinel);
    linear(x.data(), m, w.view, y.data(), KernelOptions{});
    expect_close(y, ref, scale, "linear threads=" + std::to_string(threads));
    results.push_back(std::move(y));
  }
  omp_set_num_threads(saved);
  return results;
}

// The header promises the result does not depend on the thread count (rows are split in
// fixed blocks). For the GEMV path (m <= 4) results are bitwise identical for 1, 2 and
// 3 threads; for the GEMM path they agree within the tolerance (see the disabled test
// below for the bitwise claim).
TEST(LinearThreadsTest, IndependentOfThreadCount) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dt));
    for (int64_t n : {300, 2000}) {
      const TestWeight w = make_weight(dt, n, 512, static_cast<uint32_t>(n));
      for (int64_t m : {1, 3, 4, 9, 70}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " m=" + std::to_string(m));
        const std::vector<float> x = make_input(m, 512, static_cast<uint32_t>(m));
        const auto results = run_with_threads(w, m, x);
        if (m > kGemvMaxTokens) continue;
        for (size_t i = 0; i < results[0].size(); ++i) {
          ASSERT_EQ(results[0][i], results[1][i]) << "2 threads differ at " << i;
          ASSERT_EQ(results[0][i], results[2][i]) << "3 threads differ at " << i;
        }
      }
    }
  }
}

// KNOWN FAILURE (product bug, src/moe/ops/linear.cc): linear.h says "the result does not
// depend on the thread count", but a GEMM call whose matrix fits in one work item (rows
// <= kGemmBlockBytes / (4 * k), e.g. 300 x 512) is run outside any OpenMP region, where
// the OpenMP build of OpenBLAS threads sgemm itself, and its multi-threaded sgemm differs
// in the last bits from the single-threaded one. Matrices with several items (2000 x 512)
// run each item single-threaded inside our region and are bitwise stable. Run with
// --gtest_also_run_disabled_tests to see it.
TEST(LinearThreadsTest, GemmBitwiseIndependentOfThreadCount) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const TestWeight w = make_weight(dt, 300, 512, 300);
    for (int64_t m : {5, 9, 70}) {
      SCOPED_TRACE("m=" + std::to_string(m));
      const std::vector<float> x = make_input(m, 512, static_cast<uint32_t>(m));
      const auto results = run_with_threads(w, m, x);
      int diff = 0;
      for (size_t i = 0; i < results[0].size(); ++i) diff += results[0][i] != results[1][i];
      EXPECT_EQ(diff, 0) << "elements differing between 1 and 2 threads";
    }
  }
}

// ---- linear_many -------------------------------------------------------------------

// Several jobs of different dtypes, shapes and token counts (GEMV and GEMM sizes, and
// one skipped job with m = 0), in one call: each must equal the naive reference.
void check_linear_many(const std::vector<std::pair<DType, Shape>>& specs, const std::vector<int64_t>& ms) {
  ASSERT_EQ(specs.size(), ms.size());
  std::vector<TestWeight> ws;
  std::vector<std::vector<float>> xs, ys;
  for (size_t j = 0; j < specs.size(); ++j) {
    ws.push_back(make_weight(specs[j].first, specs[j].second.n, specs[j].second.k, static_cast<uint32_t>(100 + j)));
    xs.push_back(make_input(std::max<int64_t>(ms[j], 1), specs[j].second.k, static_cast<uint32_t>(200 + j)));
    ys.emplace_back(static_cast<size_t>(ms[j] * specs[j].second.n) + 8, kSentinel);
  }
  std::vector<LinearJob> jobs;
  for (size_t j = 0; j < specs.size(); ++j) jobs.push_back({xs[j].data(), ms[j], &ws[j].view, ys[j].data()});
  linear_many(jobs.data(), jobs.size(), KernelOptions{});
  for (size_t j = 0; j < specs.size(); ++j) {
    SCOPED_TRACE("job " + std::to_string(j) + " " + dtype_name(specs[j].first) + " m=" + std::to_string(ms[j]));
    std::vector<double> ref, scale;
    naive_linear(xs[j], ms[j], ws[j], &ref, &scale);
    expect_close(ys[j], ref, scale, "linear_many");
    // GEMV-sized jobs compute each row in a fixed order: bitwise equal to linear() alone.
    // (GEMM-sized ones may not be; see DISABLED_GemmBitwiseIndependentOfThreadCount.)
    if (ms[j] <= kGemvMaxTokens) {
      std::vector<float> alone(ys[j].size(), kSentinel);
      linear(xs[j].data(), ms[j], ws[j].view, alone.data(), KernelOptions{});
      for (size_t i = 0; i < alone.size(); ++i) ASSERT_EQ(ys[j][i], alone[i]) << "differs from linear() at " << i;
    }
  }
}

TEST(LinearManyTest, SmallJobsSingleThreaded) {
  // ~10 KiB of weights in total: below the parallel threshold.
  check_linear_many({{DType::kBF16, {13, 37}}, {DType::kF32, {8, 16}}, {DType::kF16, {33, 100}}, {DType::kBF16, {5, 3}}},
                    {3, 0, 7, 1});  // the skipped job is not the last one
}

TEST(LinearManyTest, LargeJobsMultiThreaded) {
  // q/k/v-like: three projections of the same x, and expert-like groups of differing m.
  check_linear_many({{DType::kBF16, {300, 512}},
                     {DType::kBF16, {130, 512}},
                     {DType::kF16, {130, 512}},
                     {DType::kF32, {200, 96}},
                     {DType::kBF16, {96, 200}},
                     {DType::kF16, {70, 64}}},
                    {2, 2, 0, 40, 5, 3});
}

TEST(LinearManyTest, EmptyListAndAllSkipped) {
  linear_many(nullptr, 0, KernelOptions{});
  const TestWeight w = make_weight(DType::kF32, 4, 8, 3);
  const std::vector<float> x = make_input(1, 8, 4);
  std::vector<float> y(4, kSentinel);
  const LinearJob jobs[2] = {{x.data(), 0, &w.view, y.data()}, {x.data(), 0, &w.view, y.data()}};
  linear_many(jobs, 2, KernelOptions{});
  for (float v : y) EXPECT_EQ(v, kSentinel);
}


// The tensor entry checks the views and runs the same kernel: identical bits.
TEST(LinearTensorTest, EntryMatchesRawKernel) {
  const TestWeight w = make_weight(DType::kBF16, 37, 64, 11);
  for (int64_t m : {1, 3, 9}) {
    const std::vector<float> x = make_input(m, 64, 12);
    std::vector<float> raw(static_cast<size_t>(m * 37)), viewed(raw.size());
    linear(x.data(), m, w.view, raw.data(), KernelOptions{});
    linear(TensorView::f32(x.data(), {m, 64}), w.view, TensorView::f32(viewed.data(), {m, 37}), KernelOptions{});
    for (size_t i = 0; i < raw.size(); ++i) ASSERT_EQ(raw[i], viewed[i]) << "m=" << m << " at " << i;
  }
}

// KernelOptions::batch_invariant: a token's row is bitwise the same whatever m is
// (the option travels with the call; no process-wide state).
TEST(LinearTensorTest, BatchInvariantRowsIndependentOfM) {
  const TestWeight w = make_weight(DType::kBF16, 70, 96, 13);
  const int64_t m = 11;
  const std::vector<float> x = make_input(m, 96, 14);
  std::vector<float> all(static_cast<size_t>(m * 70));
  linear(x.data(), m, w.view, all.data(), KernelOptions{.batch_invariant = true});
  for (int64_t t = 0; t < m; ++t) {
    std::vector<float> one(70);
    linear(x.data() + t * 96, 1, w.view, one.data(), KernelOptions{.batch_invariant = true});
    for (int64_t i = 0; i < 70; ++i) ASSERT_EQ(all[static_cast<size_t>(t * 70 + i)], one[static_cast<size_t>(i)]);
  }
}

TEST(LinearTensorDeathTest, ShapeMismatchIsAProgrammingError) {
  const TestWeight w = make_weight(DType::kF32, 4, 8, 15);
  std::vector<float> x(16), y(8);
  EXPECT_DEATH(linear(TensorView::f32(x.data(), {2, 7}), w.view, TensorView::f32(y.data(), {2, 4}), KernelOptions{}),
               "");
  EXPECT_DEATH(linear(TensorView::f32(x.data(), {2, 8}), w.view, TensorView::f32(y.data(), {1, 4}), KernelOptions{}),
               "");
}

}  // namespace
}  // namespace moe
