#!/usr/bin/env bash
# Runs the test suite. Usage: ./scripts/test.sh [--sanitize]
#   --sanitize  build in build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer and
#               run the unit and MPI tests (labels unit|mpi) under them
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build
FLAGS=(-DCMAKE_BUILD_TYPE=Release)
LABELS=()
if [ "${1:-}" = "--sanitize" ]; then
  BUILD=build-asan
  # -O1 -g1 (line tables): what ASan recommends, and half the compile time of -O2 -g.
  FLAGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DMOE_SANITIZE=ON
         -DMOE_BUILD_BENCH=OFF -DMOE_BUILD_E2E_TESTS=OFF)
  # The memory-bug hunt runs the unit and MPI tests; the e2e tests (processes started
  # through the CLI, mostly waiting on models and sockets) are built and run in the
  # Release pass only.
  LABELS=(-L "unit|mpi")
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
fi
# The official `openai` npm package, used by the serving e2e test (tests/e2e/node/).
if [ ! -d "$BUILD/node/node_modules/openai" ]; then
  echo "==> npm install openai@4 (into $BUILD/node)"
  mkdir -p "$BUILD/node"
  npm install --prefix "$BUILD/node" --no-audit --no-fund --loglevel=error openai@4 > /dev/null
fi
export MOE_NODE_MODULES="$PWD/$BUILD/node/node_modules"
cmake -S . -B "$BUILD" -G Ninja "${FLAGS[@]}" > /dev/null
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest --output-on-failure -j"$(nproc)" --timeout 600 "${LABELS[@]}"
