#!/usr/bin/env bash
# Runs the test suite. Usage: ./scripts/test.sh [--sanitize]
#   --sanitize  build in build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build
FLAGS=(-DCMAKE_BUILD_TYPE=Release)
if [ "${1:-}" = "--sanitize" ]; then
  BUILD=build-asan
  FLAGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOE_SANITIZE=ON -DMOE_BUILD_BENCH=OFF)
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
fi
cmake -S . -B "$BUILD" -G Ninja "${FLAGS[@]}" > /dev/null
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest --output-on-failure -j"$(nproc)" --timeout 600
