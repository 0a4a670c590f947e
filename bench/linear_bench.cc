// Linear-layer kernels on the 579M benchmark model's shapes: our bf16 GEMV/GEMM paths
// vs OpenBLAS on an f32 copy of the same weights (what using the library directly
// would cost: 2x the weight memory). Debian's OpenBLAS 0.3.21 is built without
// bfloat16 (no cblas_sbgemv/sbgemm), and oneDNN 2.6 has bf16 matmul only for
// AVX-512/AMX, so neither can read bf16 weights in place on an AVX2 CPU.
//
// BM_moe_linear_path: the same shapes on each kernel path (ops/kernel_isa.h: 0 avx2,
// 1 avx512, 2 avx512-bf16; paths the CPU lacks are skipped) with bf16 or int8 weights
// (int8 = 1: model/int8_quant.h), decode only (m = 1).
//
//   ./build/bench/linear_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <random>
#include <vector>

#include "moe/model/int8_quant.h"
#include "moe/ops/linear.h"
#include "moe/tensor/dtype.h"

namespace {

struct Problem {
  std::vector<uint16_t> w_bf16;
  std::vector<float> w_f32;
  std::vector<float> x, y;
  moe::Weight2D w;
};

Problem make(int64_t n, int64_t k, int64_t m) {
  Problem p;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  p.w_bf16.resize(static_cast<size_t>(n * k));
  p.w_f32.resize(p.w_bf16.size());
  for (size_t i = 0; i < p.w_bf16.size(); ++i) {
    p.w_bf16[i] = moe::f32_to_bf16(dist(rng));
    p.w_f32[i] = moe::bf16_to_f32(p.w_bf16[i]);
  }
  p.x.resize(static_cast<size_t>(m * k));
  for (auto& v : p.x) v = dist(rng);
  p.y.resize(static_cast<size_t>(m * n));
  p.w = {p.w_bf16.data(), moe::DType::kBF16, n, k};
  return p;
}

void set_counters(benchmark::State& state, int64_t n, int64_t k, int64_t m, size_t weight_bytes) {
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes) * state.iterations(),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * k * m * state.iterations(), benchmark::Counter::kIsRate,
                                                 benchmark::Counter::kIs1000);
}

// args: n, k, m, threads
void BM_moe_linear_bf16(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  omp_set_num_threads(static_cast<int>(state.range(3)));
  Problem p = make(n, k, m);
  for (auto _ : state) {
    moe::linear(p.x.data(), m, p.w, p.y.data(), moe::KernelOptions{});
    benchmark::DoNotOptimize(p.y.data());
  }
  set_counters(state, n, k, m, p.w_bf16.size() * 2);
}

void BM_openblas_f32_copy(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  omp_set_num_threads(static_cast<int>(state.range(3)));
  Problem p = make(n, k, m);
  for (auto _ : state) {
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), static_cast<int>(k), 1.0f, p.w_f32.data(),
                  static_cast<int>(k), p.x.data(), 1, 0.0f, p.y.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), 1.0f, p.x.data(), static_cast<int>(k), p.w_f32.data(), static_cast<int>(k),
                  0.0f, p.y.data(), static_cast<int>(n));
    }
    benchmark::DoNotOptimize(p.y.data());
  }
  set_counters(state, n, k, m, p.w_f32.size() * 4);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "k", "m", "threads"});
  for (int threads : {1, 2}) {
    for (int m : {1, 512}) {
      b->Args({2816, 1024, m, threads});  // expert w1/w3
      b->Args({1024, 2816, m, threads});  // expert w2
      b->Args({2048, 1024, m, threads});  // lm_head
    }
  }
  b->UseRealTime();
}

// args: n, k, threads, isa (0 avx2, 1 avx512, 2 avx512-bf16), int8
void BM_moe_linear_path(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1);
  const moe::KernelIsa isas[] = {moe::KernelIsa::kAvx2, moe::KernelIsa::kAvx512, moe::KernelIsa::kAvx512Bf16};
  const moe::KernelIsa isa = isas[state.range(3)];
  if (!moe::cpu_supports(isa)) {
    state.SkipWithError("kernel path not supported by this CPU");
    return;
  }
  omp_set_num_threads(static_cast<int>(state.range(2)));
  Problem p = make(n, k, 1);
  std::vector<uint8_t> q8;
  const moe::Weight2D w = state.range(4) ? moe::quantize_to_int8(p.w, &q8) : p.w;
  for (auto _ : state) {
    moe::linear(p.x.data(), 1, w, p.y.data(), moe::KernelOptions{false, isa});
    benchmark::DoNotOptimize(p.y.data());
  }
  set_counters(state, n, k, 1, w.bytes());
}

void path_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "k", "threads", "isa", "int8"});
  for (int threads : {1, 2})
    for (int int8 : {0, 1})
      for (int isa : {0, 1, 2}) {
        b->Args({2816, 1024, threads, isa, int8});
        b->Args({1024, 2816, threads, isa, int8});
      }
  b->UseRealTime();
}

BENCHMARK(BM_moe_linear_bf16)->Apply(shapes);
BENCHMARK(BM_moe_linear_path)->Apply(path_shapes);
BENCHMARK(BM_openblas_f32_copy)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
