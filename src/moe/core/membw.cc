#include "moe/core/membw.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "moe/core/clock.h"
#include "moe/core/huge_page_arena.h"

namespace moe {

double measure_read_bandwidth(size_t buffer_bytes, int threads, int repeats) {
  const size_t n = buffer_bytes / sizeof(float) / 64 * 64;
  // In huge pages where the kernel has them, as the engine holds its weights by default
  // (huge_page_arena.h): 4 KiB pages would bound the read rate lower than the hardware's.
  HugePageArena arena(n * sizeof(float));
  float* buf = reinterpret_cast<float*>(arena.allocate(n * sizeof(float)));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = 1.0f;  // first touch by the reading thread
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_seconds();
    float total = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; i += 64) {
      __m256 a = _mm256_load_ps(buf + i), b = _mm256_load_ps(buf + i + 8);
      __m256 c = _mm256_load_ps(buf + i + 16), d = _mm256_load_ps(buf + i + 24);
      a = _mm256_add_ps(a, _mm256_load_ps(buf + i + 32));
      b = _mm256_add_ps(b, _mm256_load_ps(buf + i + 40));
      c = _mm256_add_ps(c, _mm256_load_ps(buf + i + 48));
      d = _mm256_add_ps(d, _mm256_load_ps(buf + i + 56));
      __m256 s = _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d));
      float tmp[8];
      _mm256_storeu_ps(tmp, s);
      total += tmp[0];
    }
    const double dt = now_seconds() - t0;
    sink = sink + total;
    best = std::max(best, static_cast<double>(n * sizeof(float)) / dt);
  }
  return best;
}

}  // namespace moe
