// Measures this machine's memory read bandwidth, the bound on weight-streaming decode.
#pragma once

#include <cstddef>

namespace moe {

// Reads a `buffer_bytes` buffer (far larger than the caches; in transparent huge pages
// where the kernel offers them, as the engine's weights: huge_page_arena.h) with
// `threads` OpenMP threads, `repeats` times, and returns the best rate in bytes/second.
double measure_read_bandwidth(size_t buffer_bytes, int threads, int repeats);

}  // namespace moe
