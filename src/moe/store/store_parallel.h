// A tiny parallel-for for the store's shard loops (hash, encode + write, verify): work
// items [0, n) taken from a shared atomic index by `threads` std::threads, while the
// calling thread reports progress (StoreProgressFn is documented as called from the
// caller's thread).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "moe/status.h"
#include "moe/store/store_writer.h"

namespace moe {

// Runs work(i, done) for every i in [0, n) on min(threads, n) threads. `work` adds the
// units it finished to `done`; progress(label, done, total) is called by the caller
// every ~100 ms and once at the end (when given). After the first error no new item is
// started; that error is returned (the others are dropped).
Status run_parallel(size_t n, int threads, const std::string& label, uint64_t total, const StoreProgressFn& progress,
                    const std::function<Status(size_t, std::atomic<uint64_t>&)>& work);

}  // namespace moe
