#!/usr/bin/env bash
# Interleaved measurement of the --trace hooks' cost (docs/history/tracing.md, "Per-step tracing
# overhead"): a binary without them (BASE, e.g. main's build/moe) against this build with
# tracing off and on.
#   BASE=/path/to/main/moe [MODE=ep|cpu] [N=rounds] scripts/bench_trace_overhead.sh
# ep:  decode tok/s of `mpirun -np 2 moe generate --ep 2` on $MODEL (default bench-mixtral-579m)
# cpu: CPU ms (perf stat task-clock) of one-process `moe bench generate` on the shipped model
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:?set BASE to a moe binary without the trace hooks}
NEW=${NEW:-./build/moe}
MODE=${MODE:-cpu}; N=${N:-20}
MODEL=${MODEL:-/work/models/bench-mixtral-579m}
TRACE=$(mktemp -d)/trace.json
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ep() { mpirun --oversubscribe -np 2 "$1" generate --ep 2 --threads 1 --model "$MODEL" --prompt "ROMEO: what light" \
         --max-tokens 32 --temperature 0 ${2:-} 2>&1 | grep -o "generated [0-9]* tokens, [0-9.]* tok/s" | awk '{print $4}'; }
cpu() { perf stat -x, -e task-clock "$1" bench generate --threads 1 --prompt-tokens 16 --gen-tokens 200 --repeats 5 \
          --bw-buffer-mb 8 ${2:-} 2>&1 >/dev/null | awk -F, '/task-clock/ {print $1}'; }
for i in $(seq "$N"); do
  echo "main $($MODE "$BASE")"
  echo "off  $($MODE "$NEW")"
  echo "on   $($MODE "$NEW" "--trace $TRACE")"
done
