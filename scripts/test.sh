#!/usr/bin/env bash
# Runs the test suite. Usage: ./scripts/test.sh [--sanitize | --tsan | --options-off]
#   --sanitize  build in build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer and
#               run the unit and MPI tests (labels unit|mpi) under them
#   --tsan      build in build-tsan/ with ThreadSanitizer (MOE_TSAN) and run the unit tests
#               of the threaded parts: scheduler, HTTP server, rate limiter, thread pool,
#               in-process communicator (not run in CI: a whole extra build)
#   --options-off  build in build-options-off/ with every optional part off (MOE_WITH_ONEDNN,
#               MOE_WITH_GLOO, MOE_WITH_RSVG): the binary and the test of their refusals
# MOE_PHASE_LOG=FILE appends "<phase> <seconds>" lines (build and run times) to FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--options-off" ]; then
  phase_start=$SECONDS
  cmake -S . -B build-options-off -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_WITH_ONEDNN=OFF -DMOE_WITH_GLOO=OFF \
    -DMOE_WITH_RSVG=OFF -DMOE_BUILD_BENCH=OFF > /dev/null
  cmake --build build-options-off -j"$(nproc)" --target moe_cli optional_features_cli_test
  cd build-options-off
  status=0
  ctest --output-on-failure -R OptionalFeaturesCli || status=$?
  [ -z "${MOE_PHASE_LOG:-}" ] || echo "options-off $((SECONDS - phase_start))" >> "$MOE_PHASE_LOG"
  exit $status
fi
case "${1:-}" in
  "" | --sanitize | --tsan) ;;
  -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "test.sh: unknown option '$1' (usage: ./scripts/test.sh [--sanitize | --tsan | --options-off])" >&2; exit 2 ;;
esac
BUILD=build
FLAGS=(-DCMAKE_BUILD_TYPE=Release)
LABELS=()
TSAN_TESTS=(scheduler_test scheduler_faults_test http_server_test http_hardening_test http_choices_test
            http_faults_test rate_limiter_test serve_loop_test inproc_communicator_test faulty_communicator_test
            disk_tier_test)
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
phase_start=$SECONDS
cmake --build "$BUILD" -j"$(nproc)"
PHASE=tests
[ "$BUILD" = build ] || PHASE=sanitizer
[ -z "${MOE_PHASE_LOG:-}" ] || echo "$PHASE-build $((SECONDS - phase_start))" >> "$MOE_PHASE_LOG"
phase_start=$SECONDS
cd "$BUILD"
status=0
ctest --output-on-failure -j"$(nproc)" --timeout 600 "${LABELS[@]}" || status=$?
[ -z "${MOE_PHASE_LOG:-}" ] || echo "$PHASE-run $((SECONDS - phase_start))" >> "$MOE_PHASE_LOG"
exit $status
