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
# npm packages the tests run under node (tests/e2e/node/, tests/model/node/,
# tests/serve/node/): the official `openai` client; Hugging Face's tokenizers (the Rust
# library's Node binding, and the pure-JS @huggingface/tokenizers) and @huggingface/jinja
# as independent references for our tokenizer.json and chat-template implementations.
NPM_PACKAGES=(openai@4 tokenizers@0.23.2 @huggingface/tokenizers@0.2.0 @huggingface/jinja@0.5.13 kubernetes-models@4.5.1)
for pkg in "${NPM_PACKAGES[@]}"; do
  if [ ! -d "$BUILD/node/node_modules/${pkg%@*}" ]; then
    echo "==> npm install ${NPM_PACKAGES[*]} (into $BUILD/node)"
    mkdir -p "$BUILD/node"
    npm install --prefix "$BUILD/node" --no-audit --no-fund --loglevel=error "${NPM_PACKAGES[@]}" > /dev/null
    break
  fi
done
export MOE_NODE_MODULES="$PWD/$BUILD/node/node_modules"
cmake -S . -B "$BUILD" -G Ninja "${FLAGS[@]}" > /dev/null
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest --output-on-failure -j"$(nproc)" --timeout 600 "${LABELS[@]}"
