// Every kernel path of linear() (ops/kernel_isa.h: AVX2, AVX-512F, AVX512_BF16) against
// a naive double-precision reference, for f32/bf16/f16 weights, token counts on both
// sides of kGemvMaxTokens and shapes with tails (k % 32 != 0, n % 4 != 0); plus the
// invariance promises per path: bitwise the same result for 1, 2 and 3 threads, and a
// token's row independent of m under batch_invariant. A path this CPU lacks is skipped
// by name (GTEST_SKIP: counted as skipped).
//
// Tolerance 1e-5 * sum |w x| for every path: the AVX512_BF16 path splits x into two
// bf16 parts whose sum is within 2^-18 |x| of x (kernel_isa.h), well inside it.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "moe/ops/linear.h"
#include "ops/linear_ref.h"

namespace moe {
namespace {

using testref::kSentinel;

struct IsaCase {
  KernelIsa isa;
  DType dtype;
};

std::string isa_case_name(const ::testing::TestParamInfo<IsaCase>& info) {
  std::string s = std::string(kernel_isa_name(info.param.isa)) + "_" + dtype_name(info.param.dtype);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

class LinearIsaTest : public ::testing::TestWithParam<IsaCase> {
 protected:
  void SetUp() override {
    if (!cpu_supports(GetParam().isa)) {
      GTEST_SKIP() << "kernel path " << kernel_isa_name(GetParam().isa) << " is not supported by this CPU: skipped";
    }
  }
  KernelOptions options(bool invariant) const { return KernelOptions{invariant, GetParam().isa}; }
};

std::vector<double> tolerance(const std::vector<double>& scale) {
  std::vector<double> tol(scale.size());
  for (size_t i = 0; i < scale.size(); ++i) tol[i] = 1e-5 * scale[i];
  return tol;
}

TEST_P(LinearIsaTest, MatchesNaiveDouble) {
  const struct {
    int64_t n, k;
  } shapes[] = {{1, 1}, {5, 3}, {7, 40}, {13, 37}, {9, 64}, {67, 100}, {300, 512}};
  for (const auto& s : shapes) {
    const testref::TestWeight w = testref::make_weight(GetParam().dtype, s.n, s.k, static_cast<uint32_t>(s.n * 31 + s.k));
    for (int64_t m : {1, 2, 3, 4, 5, 17, 130}) {
      SCOPED_TRACE("n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " m=" + std::to_string(m));
      const std::vector<float> x = testref::make_input(m, s.k, static_cast<uint32_t>(m * 7 + s.k));
      std::vector<double> ref, scale;
      testref::naive_linear(x, m, w.values, s.n, s.k, &ref, &scale);
      for (bool invariant : {false, true}) {
        std::vector<float> y(static_cast<size_t>(m * s.n) + 8, kSentinel);
        linear(x.data(), m, w.view, y.data(), options(invariant));
        testref::expect_within(y, ref, tolerance(scale), invariant ? "invariant" : "default");
      }
    }
  }
}

TEST_P(LinearIsaTest, BitwiseIndependentOfThreadCount) {
  const int saved = omp_get_max_threads();
  const testref::TestWeight w = testref::make_weight(GetParam().dtype, 2000, 512, 5);
  for (int64_t m : {1, 4, 9}) {
    const std::vector<float> x = testref::make_input(m, 512, static_cast<uint32_t>(m));
    std::vector<std::vector<float>> ys;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      ys.emplace_back(static_cast<size_t>(m * 2000));
      linear(x.data(), m, w.view, ys.back().data(), options(/*invariant=*/m > kGemvMaxTokens));
    }
    for (size_t i = 0; i < ys[0].size(); ++i) {
      ASSERT_EQ(ys[0][i], ys[1][i]) << "m=" << m << ": 2 threads differ at " << i;
      ASSERT_EQ(ys[0][i], ys[2][i]) << "m=" << m << ": 3 threads differ at " << i;
    }
  }
  omp_set_num_threads(saved);
}

TEST_P(LinearIsaTest, InvariantRowsIndependentOfM) {
  const testref::TestWeight w = testref::make_weight(GetParam().dtype, 70, 96, 13);
  const int64_t m = 11;
  const std::vector<float> x = testref::make_input(m, 96, 14);
  std::vector<float> all(static_cast<size_t>(m * 70));
  linear(x.data(), m, w.view, all.data(), options(true));
  for (int64_t t = 0; t < m; ++t) {
    std::vector<float> one(70);
    linear(x.data() + t * 96, 1, w.view, one.data(), options(true));
    for (int64_t i = 0; i < 70; ++i) ASSERT_EQ(all[static_cast<size_t>(t * 70 + i)], one[static_cast<size_t>(i)]) << t;
  }
}

std::vector<IsaCase> isa_cases() {
  std::vector<IsaCase> out;
  for (KernelIsa isa : testref::kAllIsas)
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) out.push_back({isa, dt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Paths, LinearIsaTest, ::testing::ValuesIn(isa_cases()), isa_case_name);

// Hand case on every supported path: W = [[1, 2, 3], [-1, 0.5, 0]], x = [2, -2, 4].
TEST(LinearIsaHandTest, SmallMatrixExact) {
  const float wf[6] = {1, 2, 3, -1, 0.5f, 0};
  const float x[3] = {2, -2, 4};
  std::vector<std::string> skipped;
  for (KernelIsa isa : testref::kAllIsas) {
    if (!cpu_supports(isa)) {
      skipped.push_back(kernel_isa_name(isa));
      continue;
    }
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(kernel_isa_name(isa)) + " " + dtype_name(dt));
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
      float y[2];
      linear(x, 1, w, y, KernelOptions{false, isa});
      EXPECT_EQ(y[0], 10.0f);  // 2 - 4 + 12
      EXPECT_EQ(y[1], -3.0f);  // -2 - 1
    }
  }
  if (!skipped.empty()) std::cout << "[ SKIPPED PATHS ] not supported by this CPU: " << ::testing::PrintToString(skipped) << "\n";
}

TEST(KernelIsaTest, NamesRoundTripAndAutoResolves) {
  for (KernelIsa isa : {KernelIsa::kAuto, KernelIsa::kAvx2, KernelIsa::kAvx512, KernelIsa::kAvx512Bf16}) {
    EXPECT_EQ(parse_kernel_isa(kernel_isa_name(isa)), isa);
  }
  EXPECT_FALSE(parse_kernel_isa("avx512bf16").has_value());
  EXPECT_FALSE(parse_kernel_isa("").has_value());
  EXPECT_TRUE(cpu_supports(KernelIsa::kAvx2));  // the build's baseline
  EXPECT_EQ(resolve_kernel_isa(KernelIsa::kAuto), best_kernel_isa());
  EXPECT_TRUE(cpu_supports(best_kernel_isa()));
  // The order: bf16 implies avx512 implies avx2.
  if (cpu_supports(KernelIsa::kAvx512Bf16)) {
    EXPECT_TRUE(cpu_supports(KernelIsa::kAvx512));
  }
  // cpuid against the kernel's own flags in /proc/cpuinfo (Linux): an independent reading.
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  }
  if (!flags.empty()) {
    auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
    const bool avx512 = has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq");
    EXPECT_EQ(cpu_supports(KernelIsa::kAvx512), avx512);
    EXPECT_EQ(cpu_supports(KernelIsa::kAvx512Bf16), avx512 && has("avx512_bf16"));
    EXPECT_EQ(cpu_has_avx512_vnni(), avx512 && has("avx512_vnni"));
    EXPECT_EQ(cpu_has_amx(), has("amx_tile"));
  }
  std::cout << "[ KERNELS ] best path on this CPU: " << kernel_isa_name(best_kernel_isa())
            << ", vnni: " << cpu_has_avx512_vnni() << ", amx: " << cpu_has_amx() << "\n";
}

}  // namespace
}  // namespace moe
