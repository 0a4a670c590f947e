#include "moe/serve_bench/schedule.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

namespace moe::serve_bench {

StatusOr<std::vector<double>> request_arrivals(int n, double rate, double burstiness, uint64_t seed) {
  if (n < 0) return invalid_argument("request count must be >= 0");
  if (!(rate > 0)) return invalid_argument("--request-rate must be > 0 (or inf)");
  if (!(burstiness > 0) || !std::isfinite(burstiness)) return invalid_argument("--burstiness must be > 0");
  std::vector<double> t(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return t;
  std::mt19937_64 rng(seed);
  const double theta = 1.0 / (rate * burstiness);
  std::gamma_distribution<double> gamma(burstiness, theta);
  double now = 0;
  for (int i = 0; i < n; ++i) {
    t[static_cast<size_t>(i)] = now;
    double gap;
    if (burstiness == 1.0) {
      // Exponential by inversion: the same draws for a seed with any standard library.
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
      gap = -std::log1p(-u) / rate;
    } else {
      gap = gamma(rng);
    }
    now += gap;
  }
  return t;
}

StatusOr<double> parse_request_rate(const std::string& text) {
  if (text == "inf" || text == "infinity" || text == "Inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(v > 0) || !std::isfinite(v)) {
    return invalid_argument("--request-rate: '" + text + "' is not a positive number of requests/s or 'inf'");
  }
  return v;
}

}  // namespace moe::serve_bench
