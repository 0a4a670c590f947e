// Keeping OpenBLAS (OpenMP build) single-threaded where we call it.
//
// All kernel threading is ours (fixed row blocks over OpenMP threads), so results never
// depend on the thread count. Inside our parallel regions OpenBLAS already runs
// single-threaded (omp_in_parallel()); a call made outside one would otherwise follow
// omp_get_max_threads() and thread sgemm itself, changing the last bits with the thread
// count. openblas_set_num_threads(1) is no fix: it also sets OpenMP's thread count.
#pragma once

#include <omp.h>

namespace moe {

// RAII: OpenMP's thread count is 1 for this scope (so OpenBLAS calls made in it are
// serial), restored afterwards. Cheap: no threads are started or stopped.
class ScopedSerialBlas {
 public:
  ScopedSerialBlas() : prev_(omp_get_max_threads()) {
    if (prev_ > 1) omp_set_num_threads(1);
  }
  ~ScopedSerialBlas() {
    if (prev_ > 1) omp_set_num_threads(prev_);
  }
  ScopedSerialBlas(const ScopedSerialBlas&) = delete;
  ScopedSerialBlas& operator=(const ScopedSerialBlas&) = delete;

 private:
  int prev_;
};

}  // namespace moe
