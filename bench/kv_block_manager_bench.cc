// The prefix cache's bookkeeping per prefill token: a prompt of N tokens through
// KvBlockManager::begin (lookup), ensure and commit (hashing each full block with
// XXH3-128 and registering it), then free, on a cold cache (every block a miss, then
// cached: the prefill that pays the hashing) and on a warm one (every block a hit,
// token ids compared). Reported per token; docs/performance.md compares it with the
// prefill time per token.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "moe/kv/block_manager.h"

namespace moe {
namespace {

void run(benchmark::State& state, bool warm) {
  const int64_t n = state.range(0);
  const int block = static_cast<int>(state.range(1));
  KvBlockManager m({.num_blocks = 4 * n / block + 8, .block_size = block, .enable_prefix_caching = true,
                    .hash_for_test = nullptr});
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), 7);
  const KvBlockHash root = kv_root_hash("model=bench");
  uint64_t id = 0;
  if (warm) {  // cache the prompt once
    m.begin(++id, tokens, n - 1, root, true);
    m.ensure(id, n);
    m.commit(id, tokens, n);
    m.free(id);
  }
  for (auto _ : state) {
    ++id;
    if (!warm) {
      tokens[0] = static_cast<int32_t>(id);  // a new prompt: every block misses
    }
    const int64_t hit = m.begin(id, tokens, n - 1, root, true);
    benchmark::DoNotOptimize(hit);
    m.ensure(id, n);
    m.commit(id, tokens, n);
    m.free(id);
  }
  state.SetItemsProcessed(state.iterations() * n);  // tokens
}

void BM_PrefillBookkeepingCold(benchmark::State& state) { run(state, false); }
void BM_PrefillBookkeepingWarm(benchmark::State& state) { run(state, true); }
BENCHMARK(BM_PrefillBookkeepingCold)->Args({512, 16})->Args({4096, 16})->Args({4096, 64});
BENCHMARK(BM_PrefillBookkeepingWarm)->Args({512, 16})->Args({4096, 16})->Args({4096, 64});

}  // namespace
}  // namespace moe

BENCHMARK_MAIN();
