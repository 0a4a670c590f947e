// When each request is sent, as offsets in seconds from the start of the benchmark.
// vLLM's get_request: the first request goes at 0; after each, the next waits a gap
// drawn from Gamma(shape = burstiness, scale = 1 / (rate * burstiness)) - mean
// 1 / rate; burstiness 1 is a Poisson process (exponential gaps), < 1 burstier,
// > 1 more even. rate = infinity sends everything at 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::serve_bench {

// InvalidArgument unless n >= 0, rate > 0 (may be +inf), burstiness > 0.
StatusOr<std::vector<double>> request_arrivals(int n, double rate, double burstiness, uint64_t seed);

// "inf" (also "infinity") or a positive number of requests per second.
StatusOr<double> parse_request_rate(const std::string& text);

}  // namespace moe::serve_bench
