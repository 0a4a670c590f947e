#!/usr/bin/env bash
# libFuzzer targets (fuzz/): builds them in build-asan/ (clang, ASan + UBSan and
# libFuzzer's coverage: scripts/asan_build.sh; the build of scripts/test.sh --sanitize)
# and runs each on its seed corpus (fuzz/corpus/<target>/, copied to build-asan/corpus/
# so that what a run finds is kept there, not in git) for SECONDS.
# A crash, leak, sanitizer report or timeout fails the script; libFuzzer writes the input
# as build-asan/crash-*/leak-*/timeout-*. Prints each target's executions and coverage.
# Usage: ./scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (CI: 10 s each)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(safetensors config tokenizer_json tokenizer_input openai_request placement_files store_manifest)
source scripts/asan_build.sh
asan_configure
cmake --build build-asan -j"$(nproc)" --target "${TARGETS[@]/#/fuzz_}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${TARGETS[@]}"; do
  corpus=build-asan/corpus/$t
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  log=build-asan/fuzz_$t.log
  if (cd build-asan && ./fuzz/fuzz_"$t" -max_total_time="$SECONDS_EACH" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "corpus/$t") > "$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || echo "?")
  echo "fuzz_$t: $result, $execs executions in ${SECONDS_EACH} s, $cov, corpus $(ls "$corpus" | wc -l) inputs"
  [ $result = ok ] || tail -40 "$log"
done
exit $status
