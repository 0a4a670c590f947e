// MOE_CHECK: invariants that only a bug can break. Prints file:line and aborts.
// Never use it for anything a user can cause (bad files, flags, requests): return a
// Status for those (include/moe/status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

#define MOE_CHECK(cond)                                                          \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: MOE_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                              \
    }                                                                            \
  } while (0)
