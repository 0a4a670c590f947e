#!/usr/bin/env bash
# Runs the test suite. Usage: ./scripts/test.sh [--sanitize | --tsan]
#   --sanitize  build in build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer and
#               run the unit and MPI tests (labels unit|mpi) under them
#   --tsan      build in build-tsan/ with ThreadSanitizer (MOE_TSAN) and run the unit tests
#               of the threaded parts: scheduler, HTTP server, rate limiter, thread pool,
#               in-process communicator (not run in CI: a whole extra build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build
FLAGS=(-DCMAKE_BUILD_TYPE=Release)
LABELS=()
TSAN_TESTS=(scheduler_test scheduler_faults_test http_server_test http_hardening_test http_choices_test
            http_faults_test rate_limiter_test serve_loop_test inproc_communicator_test faulty_communicator_test)
if [ "${1:-}" = "--tsan" ]; then
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    -DMOE_TSAN=ON -DMOE_BUILD_BENCH=OFF -DMOE_BUILD_E2E_TESTS=OFF > /dev/null
  cmake --build build-tsan -j"$(nproc)" --target "${TSAN_TESTS[@]}"
  # One OpenMP thread: libgomp is not built with TSan, so its barriers are invisible to it
  # and every buffer an OpenMP team read is reported as racing with its later free on the
  # main thread (4 such reports in scheduler_test with 2 threads, each with the worker's
  # stack lost). The threads under test here are our own std::threads.
  export OMP_NUM_THREADS=1
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
  cd build-tsan
  for t in "${TSAN_TESTS[@]}"; do
    [ -x "tests/$t" ] && ./tests/"$t" --gtest_brief=1
  done
  exit 0
fi
if [ "${1:-}" = "--sanitize" ]; then
  BUILD=build-asan
  # The memory-bug hunt runs the unit and MPI tests (clang, ASan + UBSan: asan_build.sh).
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
if [ "$BUILD" = build-asan ]; then
  source scripts/asan_build.sh
  asan_configure
else
  cmake -S . -B "$BUILD" -G Ninja "${FLAGS[@]}" > /dev/null
fi
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest --output-on-failure -j"$(nproc)" --timeout 600 "${LABELS[@]}"
