// moe bench fp8: FP8 weights kept in FP8 and dequantised in the GEMV kernel ("--fp8
// native") against the same weights dequantised once to bf16 ("--fp8 dequant"), on
// DeepSeek-expert-shaped matrices (default 2048 x 7168 and 7168 x 2048: V3's
// moe_intermediate_size x hidden_size and back). Per shape and thread count it reports
// the weight bytes one decode token reads, the median time of one GEMV (m tokens), the
// GB/s and tok/s-equivalent (GEMVs per second), and bf16 time / FP8 time. A and B run
// interleaved (A, B, A, B, ...), each over a pool of distinct matrices larger than the
// caches (--pool-mb), so both stream from memory as a decode step does.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "moe/model/fp8_dequant.h"
#include "moe/ops/linear.h"

namespace moe::cli {
namespace {

struct Fp8BenchFlags {
  std::vector<std::string> shapes = {"2048x7168", "7168x2048"};
  std::vector<int> threads = {1, 2};
  int tokens = 1;
  int repeats = 7;
  int pool_mb = 256;
};

struct Pool {
  std::vector<std::vector<uint8_t>> codes, bf16;
  std::vector<std::vector<float>> scales;
  std::vector<Weight2D> fp8_w, bf16_w;
};

// Weights as DeepSeek-V3's checkpoints are made: normal values quantised per 128 x 128
// block with scale = amax / 448 (round to nearest). One matrix is made, then copied
// to the rest of the pool (distinct memory, the same content).
Pool make_pool(int64_t rows, int64_t cols, size_t pool_bytes) {
  Pool p;
  const size_t per = static_cast<size_t>(rows * cols) * 2;  // bf16: the larger of the two
  const size_t n = std::max<size_t>(2, (pool_bytes + per - 1) / per);
  std::vector<float> positive;  // codes 0..0x7e, increasing
  for (int c = 0; c <= 0x7e; ++c) positive.push_back(f8e4m3_to_f32(static_cast<uint8_t>(c)));
  std::mt19937 rng(7);
  std::normal_distribution<float> value(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = value(rng);
  const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
  std::vector<uint8_t> codes(w.size());
  std::vector<float> scales(static_cast<size_t>(sr * sc));
  for (int64_t bi = 0; bi < sr; ++bi)
    for (int64_t bj = 0; bj < sc; ++bj) {
      const int64_t r1 = std::min(rows, (bi + 1) * 128), c1 = std::min(cols, (bj + 1) * 128);
      float amax = 0;
      for (int64_t r = bi * 128; r < r1; ++r)
        for (int64_t c = bj * 128; c < c1; ++c) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + c)]));
      const float scale = amax > 0 ? amax / 448.0f : 1.0f;
      scales[static_cast<size_t>(bi * sc + bj)] = scale;
      for (int64_t r = bi * 128; r < r1; ++r)
        for (int64_t c = bj * 128; c < c1; ++c) {
          const float v = w[static_cast<size_t>(r * cols + c)] / scale, a = std::min(std::fabs(v), 448.0f);
          size_t k = static_cast<size_t>(std::lower_bound(positive.begin(), positive.end(), a) - positive.begin());
          if (k > 0 && (k == positive.size() || a - positive[k - 1] <= positive[k] - a)) --k;
          codes[static_cast<size_t>(r * cols + c)] = static_cast<uint8_t>(k | (v < 0 ? 0x80 : 0));
        }
    }
  for (size_t i = 0; i < n; ++i) {
    p.codes.push_back(codes);
    p.scales.push_back(scales);
    p.fp8_w.push_back(Weight2D{p.codes.back().data(), DType::kF8E4M3, rows, cols, p.scales.back().data(), DType::kF32,
                               128, 128});
  }
  p.bf16.resize(n);
  for (size_t i = 0; i < n; ++i) p.bf16_w.push_back(dequantize_to_bf16(p.fp8_w[i], &p.bf16[i]));
  return p;
}

// Seconds per GEMV over the pool (one pass, every matrix once).
double time_pass(const std::vector<Weight2D>& ws, const float* x, int64_t m, float* y) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const Weight2D& w : ws) linear(x, m, w, y, KernelOptions{});
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(ws.size());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(const Fp8BenchFlags& f) {
  if (f.tokens < 1 || f.tokens > kGemvMaxTokens) return fail("--tokens must be 1.." + std::to_string(kGemvMaxTokens));
  if (f.repeats < 1) return fail("--repeats must be >= 1");
  if (f.pool_mb < 1) return fail("--pool-mb must be >= 1");
  std::printf("FP8 e4m3 (blocks 128x128, f32 scales) in the GEMV kernel vs bf16 dequantised at load; m = %d token(s),\n"
              "median of %d interleaved passes over a %d MB pool of matrices\n\n",
              f.tokens, f.repeats, f.pool_mb);
  std::printf("%-11s %7s %6s %12s %10s %9s %12s %9s\n", "shape", "threads", "mode", "bytes/token", "us/GEMV", "GB/s",
              "GEMV/s", "bf16/fp8");
  for (const std::string& shape : f.shapes) {
    int64_t rows = 0, cols = 0;
    if (std::sscanf(shape.c_str(), "%ldx%ld", &rows, &cols) != 2 || rows < 1 || cols < 1) {
      return fail("--shapes entries are ROWSxCOLS (got '" + shape + "')");
    }
    const Pool pool = make_pool(rows, cols, static_cast<size_t>(f.pool_mb) << 20);
    std::vector<float> x(static_cast<size_t>(f.tokens * cols)), y(static_cast<size_t>(f.tokens * rows)),
        y2(y.size());
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1, 1);
    for (auto& v : x) v = d(rng);
    // Sanity: both modes compute the same product (bf16 rounding of the weights aside).
    linear(x.data(), f.tokens, pool.fp8_w[0], y.data(), KernelOptions{});
    linear(x.data(), f.tokens, pool.bf16_w[0], y2.data(), KernelOptions{});
    double worst = 0, norm = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(double(y[i]) - y2[i])), norm += std::fabs(y[i]);
    if (!(worst <= 0.02 * norm / static_cast<double>(y.size()) + 1e-3)) {
      return fail("fp8 and bf16 GEMV disagree (max diff " + std::to_string(worst) + ")");
    }
    for (int t : f.threads) {
      if (t < 1) return fail("--threads values must be >= 1");
      omp_set_num_threads(t);
      (void)time_pass(pool.fp8_w, x.data(), f.tokens, y.data());  // warm-up
      (void)time_pass(pool.bf16_w, x.data(), f.tokens, y.data());
      std::vector<double> a, b;
      for (int r = 0; r < f.repeats; ++r) {
        a.push_back(time_pass(pool.fp8_w, x.data(), f.tokens, y.data()));
        b.push_back(time_pass(pool.bf16_w, x.data(), f.tokens, y.data()));
      }
      const double ta = median(a), tb = median(b);
      const double bytes_a = static_cast<double>(pool.fp8_w[0].bytes()), bytes_b = static_cast<double>(pool.bf16_w[0].bytes());
      std::printf("%-11s %7d %6s %12.0f %10.1f %9.2f %12.0f\n", shape.c_str(), t, "fp8", bytes_a, ta * 1e6,
                  bytes_a / ta / 1e9, 1.0 / ta);
      std::printf("%-11s %7d %6s %12.0f %10.1f %9.2f %12.0f %9.2f\n", shape.c_str(), t, "bf16", bytes_b, tb * 1e6,
                  bytes_b / tb / 1e9, 1.0 / tb, tb / ta);
    }
  }
  return 0;
}

}  // namespace

RunFn add_bench_fp8_command(CLI::App& app) {
  auto f = std::make_shared<Fp8BenchFlags>();
  app.add_option("--shapes", f->shapes, "Matrices ROWSxCOLS (out x in)")->delimiter(',')->capture_default_str();
  app.add_option("--threads", f->threads, "Thread counts to measure")->delimiter(',')->capture_default_str();
  app.add_option("--tokens", f->tokens, "Tokens per GEMV (1..4: decode)")->capture_default_str();
  app.add_option("--repeats", f->repeats, "Interleaved passes per mode (after one warm-up)")->capture_default_str();
  app.add_option("--pool-mb", f->pool_mb, "Distinct matrices per mode, in MB of bf16 (beyond the caches)")
      ->capture_default_str();
  return [f] { return run(*f); };
}

}  // namespace moe::cli
