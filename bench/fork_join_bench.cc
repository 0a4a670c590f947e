// What one OpenMP fork/join costs next to the decode work it wraps (the suspicion: "decode
// forks and joins threads about 5 times per layer"): an empty `omp parallel` + dynamic
// `omp for` over 16 items (the shape of linear_many's region), and the decode-sized
// bf16 GEMV call that such a region carries (linear_many of one [rows x 1024] matrix, one
// token), at the thread counts given by --benchmark_filter / the Threads arg.
// Run: build/bench/fork_join_bench (docs/history/single-stream.md, "Decode threading").
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <vector>

#include "moe/ops/linear.h"
#include "moe/tensor/dtype.h"
#include "moe/tensor/tensor.h"
#include "moe/tensor/weight.h"

namespace {

void BM_EmptyRegion(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  omp_set_num_threads(threads);
  std::vector<int64_t> sink(64, 0);
  for (auto _ : state) {
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
      for (int i = 0; i < 16; ++i) sink[static_cast<size_t>(omp_get_thread_num()) * 8] += i;
    }
    benchmark::DoNotOptimize(sink.data());
  }
  state.SetLabel(std::to_string(threads) + " threads");
}
BENCHMARK(BM_EmptyRegion)->Arg(1)->Arg(2)->UseRealTime();

// One token through a [rows x 1024] bf16 matrix (linear_many: one parallel region when
// the matrix is over 48 KiB).
void BM_Gemv(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1), cols = 1024;
  omp_set_num_threads(threads);
  std::vector<uint16_t> w(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = moe::f32_to_bf16(static_cast<float>(i % 97) * 1e-3f - 0.05f);
  std::vector<float> x(static_cast<size_t>(cols), 0.5f), y(static_cast<size_t>(rows));
  const moe::Weight2D weight{w.data(), moe::DType::kBF16, rows, cols};
  for (auto _ : state) {
    moe::linear(moe::TensorView::f32(x.data(), {1, cols}), weight, moe::TensorView::f32(y.data(), {1, rows}), {});
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 2);
  state.SetLabel(std::to_string(threads) + " threads");
}
BENCHMARK(BM_Gemv)->Args({1, 1024})->Args({2, 1024})->Args({1, 4096})->Args({2, 4096})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
