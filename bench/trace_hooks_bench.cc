// The per-call cost of the per-step trace hooks (docs/performance.md, "Per-step
// tracing overhead"): what a decode step pays for them with tracing off (a TraceSpan on a
// null recorder: two tests of a pointer) and on (two clock reads and a 40-byte event),
// and the always-on per-link byte counters of an exchange (4 ranks), so that the
// fraction of a step follows from the number of hooks a step runs:
//
//   ./build/bench/trace_hooks_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "moe/moe/ep_trace.h"
#include "moe/trace/trace_recorder.h"

namespace {

void BM_TraceSpanOff(benchmark::State& state) {
  moe::TraceRecorder* rec = nullptr;
  benchmark::DoNotOptimize(rec);
  for (auto _ : state) {
    moe::TraceSpan span(rec, moe::TraceName::kDispatch, 3);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_TraceSpanOff);

void BM_TraceSpanOn(benchmark::State& state) {
  constexpr int64_t kCapacity = 1 << 19;
  auto rec = std::make_unique<moe::TraceRecorder>(0, kCapacity);
  int64_t n = 0;
  for (auto _ : state) {
    if (++n % kCapacity == 0) {  // a fresh buffer: every span is recorded, none dropped
      state.PauseTiming();
      rec = std::make_unique<moe::TraceRecorder>(0, kCapacity);
      state.ResumeTiming();
    }
    moe::TraceSpan span(rec.get(), moe::TraceName::kDispatch, 3);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_TraceSpanOn);

void BM_AddLinkBytes4Ranks(benchmark::State& state) {
  moe::EpTimings t;  // trace == nullptr: the always-on counters only
  const std::vector<size_t> sent = {4096, 8192, 0, 12288}, received = {4096, 0, 8192, 4096};
  for (auto _ : state) {
    moe::add_link_bytes(&t, 3, sent, received);
    benchmark::DoNotOptimize(t.bytes_to_rank.data());
  }
}
BENCHMARK(BM_AddLinkBytes4Ranks);

}  // namespace

BENCHMARK_MAIN();
