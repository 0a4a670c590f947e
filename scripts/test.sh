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
ctest --output-on-failure -j"$(nproc)" --timeout 600
