// Shared by the kernel-path tests (linear_isa_test, linear_int8_test): exact test
// weights, inputs, and the naive double-precision reference of y = x W^T.
//
// Weights are j/128 for integer j in [-127, 127]: exactly representable in f32, bf16
// and f16, so the reference knows their values without the product's conversions.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "moe/ops/kernel_isa.h"
#include "moe/tensor/dtype.h"
#include "moe/tensor/weight.h"

namespace moe::testref {

struct TestWeight {
  std::vector<uint8_t> storage;
  std::vector<double> values;  // [n, k], exact
  Weight2D view;
};

inline TestWeight make_weight(DType dt, int64_t n, int64_t k, uint32_t seed) {
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
      const uint16_t h = dt == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(p, &h, 2);
    }
  }
  tw.view = Weight2D{tw.storage.data(), dt, n, k};
  return tw;
}

inline std::vector<float> make_input(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = dist(rng);
  return x;
}

// ref[t, r] = sum_i w[r, i] x[t, i] in double, and scale[t, r] = sum_i |w x|.
inline void naive_linear(const std::vector<float>& x, int64_t m, const std::vector<double>& w, int64_t n, int64_t k,
                         std::vector<double>* ref, std::vector<double>* scale) {
  ref->assign(static_cast<size_t>(m * n), 0.0);
  scale->assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < n; ++r) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = w[static_cast<size_t>(r * k + i)] * static_cast<double>(x[static_cast<size_t>(t * k + i)]);
        s += p;
        a += std::fabs(p);
      }
      (*ref)[static_cast<size_t>(t * n + r)] = s;
      (*scale)[static_cast<size_t>(t * n + r)] = a;
    }
  }
}

inline constexpr float kSentinel = 7.77e7f;

// |y - ref| <= tol[i] for every element of ref, and y untouched (kSentinel) after it.
inline void expect_within(const std::vector<float>& y, const std::vector<double>& ref, const std::vector<double>& tol,
                          const std::string& what) {
  ASSERT_GE(y.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!(std::fabs(static_cast<double>(y[i]) - ref[i]) <= tol[i] + 1e-30)) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << ": element " << i << " got " << y[i] << " want " << ref[i] << " (tol " << tol[i] << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
  for (size_t i = ref.size(); i < y.size(); ++i) {
    ASSERT_EQ(y[i], kSentinel) << what << ": wrote past the [m, n] output at " << i;
  }
}

// The kernel paths to test, each with whether this CPU runs it (a test skips the
// others by name: GTEST_SKIP, reported as skipped, never as passed).
inline const KernelIsa kAllIsas[] = {KernelIsa::kAvx2, KernelIsa::kAvx512, KernelIsa::kAvx512Bf16};

}  // namespace moe::testref
