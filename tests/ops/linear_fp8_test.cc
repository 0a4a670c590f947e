// linear() with FP8 e4m3 weights and block scales (kept in FP8, dequantised in the
// kernel), against a scalar dequantise-then-matmul reference written here: codes are
// decoded from the format's definition (not the product's table) and the products are
// summed in double.
//
// Values are chosen so that every path must be exact: weight codes have exponents 5..9
// (0.25 .. 3.75, multiples of 2^-5), scales are powers of two 2^-2 .. 2^2, inputs are
// integers in [-4, 4]; every partial sum is a multiple of 2^-7 below 2^17, so f32 holds
// it exactly whatever the summation order (GEMV, sgemm, threads). Shapes include
// partial edge blocks in both dimensions, blocks narrower than the 8-wide step, m = 1,
// m <= 4 (GEMV) and m > 4 (GEMM).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "moe/ops/linear.h"
#include "moe/ops/linear_fp8_cpu.h"
#include "moe/tensor/dtype.h"

namespace moe {
namespace {

double decode(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

struct Fp8Weight {
  std::vector<uint8_t> codes;   // [n, k]
  std::vector<float> scales;    // [ceil(n/br), ceil(k/bc)]
  Weight2D view;
  double at(int64_t r, int64_t c) const {
    return decode(codes[static_cast<size_t>(r * view.cols + c)]) *
           scales[static_cast<size_t>((r / view.block_rows) * view.scale_cols() + c / view.block_cols)];
  }
};

Fp8Weight make_fp8(int64_t n, int64_t k, int br, int bc, uint32_t seed) {
  Fp8Weight w;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> exp(5, 9), mant(0, 7), sign(0, 1), sexp(-2, 2);
  w.codes.resize(static_cast<size_t>(n * k));
  for (auto& c : w.codes) c = static_cast<uint8_t>(sign(rng) << 7 | exp(rng) << 3 | mant(rng));
  w.view = Weight2D{w.codes.data(), DType::kF8E4M3, n, k, nullptr, DType::kF32, br, bc};
  w.scales.resize(static_cast<size_t>(w.view.scale_rows() * w.view.scale_cols()));
  for (auto& s : w.scales) s = std::ldexp(1.0f, sexp(rng));
  w.view.scale = w.scales.data();
  return w;
}

std::vector<float> make_x(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = static_cast<float>(d(rng));
  return x;
}

// The reference: dequantise, then y = x W^T in double.
std::vector<float> reference(const Fp8Weight& w, const std::vector<float>& x, int64_t m) {
  const int64_t n = w.view.rows, k = w.view.cols;
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c) s += w.at(r, c) * x[static_cast<size_t>(t * k + c)];
      y[static_cast<size_t>(t * n + r)] = static_cast<float>(s);
    }
  return y;
}

struct Case {
  int64_t n, k;
  int br, bc;
};

const Case kCases[] = {
    {1, 1, 128, 128},    // one partial block
    {5, 7, 2, 3},        // blocks narrower than 8, partial edges both ways
    {9, 20, 3, 5},       //
    {13, 37, 4, 16},     // a 16-wide step per block plus a partial one
    {7, 40, 128, 128},   // n, k < one block
    {67, 24, 8, 8},      // 8-wide blocks: no 16-wide step
    {130, 300, 128, 128},  // DeepSeek's block size, partial edge blocks
    {300, 512, 128, 128},  // 150 KiB: the multi-threaded paths
};

TEST(LinearFp8Test, EveryPathEqualsDequantThenMatmul) {
  for (const Case& c : kCases) {
    const Fp8Weight w = make_fp8(c.n, c.k, c.br, c.bc, static_cast<uint32_t>(c.n * 100 + c.k));
    for (int64_t m : {1, 2, 3, 4, 5, 17}) {
      SCOPED_TRACE("n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " block " + std::to_string(c.br) + "x" +
                   std::to_string(c.bc) + " m=" + std::to_string(m));
      const std::vector<float> x = make_x(m, c.k, static_cast<uint32_t>(m + c.k));
      const std::vector<float> want = reference(w, x, m);
      std::vector<float> y(want.size());
      linear(x.data(), m, w.view, y.data(), KernelOptions{});
      EXPECT_EQ(y, want) << "linear";
      linear_gemm(x.data(), m, w.view, y.data());
      EXPECT_EQ(y, want) << "linear_gemm";
      linear(x.data(), m, w.view, y.data(), KernelOptions{.batch_invariant = true});
      EXPECT_EQ(y, want) << "batch invariant";
      if (m <= kGemvMaxTokens) {
        linear_gemv(x.data(), m, w.view, y.data());
        EXPECT_EQ(y, want) << "linear_gemv";
        std::vector<float> ys(want.size());
        gemv_fp8_range_scalar(LinearJob{x.data(), m, &w.view, ys.data()}, 0, c.n);
        EXPECT_EQ(ys, want) << "scalar fallback";
      }
    }
  }
}

// Hand case: W = [[1, 2, 448], [-1, 0.5, 2^-9]] as codes, blocks 1 x 2, scales
// [[0.5, 2], [4, 1]]; x = [1, 1, 1]: y = [0.5 + 1 + 896, -4 + 2 + 2^-9].
TEST(LinearFp8Test, HandCase) {
  const uint8_t codes[6] = {0x38, 0x40, 0x7e, 0xb8, 0x30, 0x01};
  const float scales[4] = {0.5f, 2.0f, 4.0f, 1.0f};
  const Weight2D w{codes, DType::kF8E4M3, 2, 3, scales, DType::kF32, 1, 2};
  const float x[3] = {1, 1, 1};
  float y[2];
  linear_gemv(x, 1, w, y);
  EXPECT_EQ(y[0], 897.5f);
  EXPECT_EQ(y[1], -2.0f + 0.001953125f);
  linear_gemm(x, 1, w, y);
  EXPECT_EQ(y[0], 897.5f);
  EXPECT_EQ(y[1], -2.0f + 0.001953125f);
}

// Every finite code through the GEMV kernel's decoder: W [32, 8] holds codes 0..255
// (NaN codes replaced by 0), scale 1; x = e_j picks column j, so y[r] = W[r, j].
TEST(LinearFp8Test, AllCodesThroughKernel) {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[static_cast<size_t>(i)] = (i & 0x7f) == 0x7f ? 0 : static_cast<uint8_t>(i);
  const float one = 1.0f;
  const Weight2D w{codes.data(), DType::kF8E4M3, 32, 8, &one, DType::kF32, 128, 128};
  for (int j = 0; j < 8; ++j) {
    float x[8] = {};
    x[j] = 1.0f;
    float y[32];
    linear_gemv(x, 1, w, y);
    for (int r = 0; r < 32; ++r) EXPECT_EQ(y[r], decode(codes[static_cast<size_t>(r * 8 + j)]) + 0.0) << r * 8 + j;
  }
  // NaN codes give NaN.
  const uint8_t nan_codes[2] = {0x7f, 0xff};
  const Weight2D wn{nan_codes, DType::kF8E4M3, 2, 1, &one, DType::kF32, 128, 128};
  float x1 = 1.0f, yn[2];
  linear_gemv(&x1, 1, wn, yn);
  EXPECT_TRUE(std::isnan(yn[0]) && std::isnan(yn[1]));
}

// The GEMV's fast decode (16 codes at a time) against dequantize_rows_f32, bitwise: W
// [16, 32] holds every finite code (NaN codes replaced by 0) and, in its last row, a
// NaN group; blocks of [8, 16] with scales from tiny to 300 (past the fast path's
// range); x = e_j picks column j, so y[r] is exactly W[r, j] as dequantised.
TEST(LinearFp8Test, FastDecodeEqualsDequantisedBitwise) {
  std::vector<uint8_t> codes(16 * 32);
  for (size_t i = 0; i < codes.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(i * 131 % 256);
    codes[i] = (c & 0x7f) == 0x7f ? 0x00 : c;
  }
  for (int c = 0; c < 256; ++c) codes[static_cast<size_t>(c)] = (c & 0x7f) == 0x7f ? 0x80 : static_cast<uint8_t>(c);
  codes[15 * 32 + 3] = 0x7f;  // a NaN in the last row's first 16-code group
  const float scales[4] = {3.0e-39f, 0.0123f, 300.0f, -1.7e-3f};  // denormal, normal, large, negative
  const Weight2D w{codes.data(), DType::kF8E4M3, 16, 32, scales, DType::kF32, 8, 16};
  std::vector<float> deq(16 * 32);
  dequantize_rows_f32(w, 0, 16, deq.data());
  for (int j = 0; j < 32; ++j) {
    std::vector<float> x(32, 0.0f);
    x[static_cast<size_t>(j)] = 1.0f;
    float y[16];
    linear_gemv(x.data(), 1, w, y);
    for (int r = 0; r < 16; ++r) {
      const float want = deq[static_cast<size_t>(r * 32 + j)];
      if (r == 15) {
        EXPECT_TRUE(std::isnan(y[r])) << j;  // the NaN weight times x_j = 0 is NaN too
        continue;
      }
      uint32_t a, b;
      std::memcpy(&a, &y[r], 4);
      std::memcpy(&b, &want, 4);
      // +0 and -0 differ only by the sum's start (0 + -0 = +0): compare values there.
      if (want == 0.0f) {
        EXPECT_EQ(y[r], 0.0f) << r << "," << j;
      } else {
        EXPECT_EQ(a, b) << "row " << r << " col " << j << ": " << y[r] << " vs " << want;
      }
    }
  }
}

// Rounded (non-exact) values: GEMV results are bitwise the same for 1, 2 and 3 threads,
// and a token's row is the same whatever m is (each token sums in its own order).
TEST(LinearFp8Test, ThreadAndBatchIndependent) {
  Fp8Weight w = make_fp8(700, 512, 128, 128, 5);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& s : w.scales) s = d(rng);
  std::vector<float> x(4 * 512);
  for (auto& v : x) v = d(rng);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> out;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> y(4 * 700);
    linear(x.data(), 4, w.view, y.data(), KernelOptions{});
    out.push_back(y);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0], out[2]);
  for (int64_t t = 0; t < 4; ++t) {
    std::vector<float> one(700);
    linear(x.data() + t * 512, 1, w.view, one.data(), KernelOptions{});
    for (int64_t r = 0; r < 700; ++r) ASSERT_EQ(one[static_cast<size_t>(r)], out[0][static_cast<size_t>(t * 700 + r)]);
  }
}

// A view of rows [5, 12) of a matrix with 4-row blocks starts mid-block: its rows keep
// their own scales (row_block; MLA takes per-head row blocks of kv_b_proj).
TEST(LinearFp8Test, RowBlockViewKeepsItsScales) {
  const Fp8Weight w = make_fp8(13, 37, 4, 16, 23);
  const std::vector<float> x = make_x(2, 37, 24);
  const std::vector<float> full = reference(w, x, 2);
  const Weight2D view = row_block(w.view, 5, 7);
  EXPECT_EQ(view.row_phase, 1);
  EXPECT_EQ(view.scale_rows(), 2);  // rows 5..11 lie in block rows 1 and 2
  for (int64_t m : {1, 2}) {
    std::vector<float> y(static_cast<size_t>(m * 7));
    linear(x.data(), m, view, y.data(), KernelOptions{});
    for (int64_t t = 0; t < m; ++t)
      for (int64_t r = 0; r < 7; ++r) EXPECT_EQ(y[static_cast<size_t>(t * 7 + r)], full[static_cast<size_t>(t * 13 + 5 + r)]);
    linear_gemm(x.data(), m, view, y.data());
    for (int64_t r = 0; r < 7; ++r) EXPECT_EQ(y[static_cast<size_t>(r)], full[static_cast<size_t>(5 + r)]);
  }
  const Weight2D inner = row_block(view, 2, 3);  // rows 7..9 of the whole
  EXPECT_EQ(inner.row_phase, 3);
  std::vector<float> y(3);
  linear(x.data(), 1, inner, y.data(), KernelOptions{});
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(y[static_cast<size_t>(r)], full[static_cast<size_t>(7 + r)]);
}

// dot_row on an FP8 matrix uses the scales of the row's own block row.
TEST(LinearFp8Test, DotRowUsesItsBlockRowsScales) {
  const Fp8Weight w = make_fp8(13, 37, 4, 16, 21);
  const std::vector<float> x = make_x(1, 37, 22);
  const std::vector<float> want = reference(w, x, 1);
  for (int64_t r = 0; r < 13; ++r) EXPECT_EQ(dot_row(x.data(), w.view, r), want[static_cast<size_t>(r)]) << r;
}

}  // namespace
}  // namespace moe
