#!/usr/bin/env bash
# The serving measurements of docs/performance.md: `moe bench serve` against `moe serve`
# on the shipped model, ShareGPT prompts, at 1, 4 and 16 concurrent streams, with EP 1
# (one process) and EP 2 (mpirun -np 2); continuous batching vs one request at a time
# (--max-num-seqs 1); batch-invariant kernels on vs off; the Azure conversation trace
# replayed by arrival time. Prints one table row per run (results in $OUT/*.json).
# Usage: tools/bench/serve_matrix.sh [OUT_DIR]   (run from the repository root, after building)
set -euo pipefail
OUT=${1:-build/bench-serve}
mkdir -p "$OUT"
MOE=./build/moe
DATA=${MOE_SHARED:-../shared}/data/prompts
PORT=18123
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

start_server() {  # $1 = ep, rest = serve flags
  local ep=$1; shift
  if [ "$ep" = 1 ]; then
    $MOE serve --port $PORT --threads 1 "$@" > "$OUT/server.log" 2>&1 &
  else
    "${MPIRUN[@]}" -np "$ep" $MOE serve --ep "$ep" --port $PORT --threads 1 "$@" > "$OUT/server.log" 2>&1 &
  fi
  SERVER=$!
  for _ in $(seq 1 100); do
    grep -q "serving " "$OUT/server.log" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "server did not start:"; cat "$OUT/server.log"; exit 1
}

stop_server() {
  kill -TERM "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
}

run() {  # $1 = label, rest = bench flags
  local label=$1; shift
  $MOE bench serve --base-url http://127.0.0.1:$PORT --tokenizer models/tiny-mixtral-shakespeare \
    --disable-progress --result-json "$OUT/$label.json" "$@" > "$OUT/$label.txt" 2>&1
  /usr/bin/python3 - "$OUT/$label.json" "$label" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {d['completed']}/{d['num_prompts']} | {d['request_throughput']:.2f} | "
      f"{d['output_throughput']:.0f} | {d['mean_ttft_ms']:.1f} / {d['p99_ttft_ms']:.1f} | "
      f"{d['mean_tpot_ms']:.2f} / {d['p99_tpot_ms']:.2f} | {d['mean_itl_ms']:.2f} / {d['p99_itl_ms']:.2f} | "
      f"{d['mean_e2el_ms']:.0f} |")
PY
}

echo "| run | done | req/s | out tok/s | TTFT mean/p99 ms | TPOT mean/p99 ms | ITL mean/p99 ms | E2EL mean ms |"
echo "|---|---|---|---|---|---|---|---|"
SHAREGPT=(--dataset "$DATA/sharegpt_v3_filtered_500.json" --seed 0)
for ep in 1 2; do
  start_server "$ep"
  run "ep${ep}_c1" "${SHAREGPT[@]}" --num-prompts 16 --max-concurrency 1
  run "ep${ep}_c4" "${SHAREGPT[@]}" --num-prompts 32 --max-concurrency 4
  run "ep${ep}_c16" "${SHAREGPT[@]}" --num-prompts 64 --max-concurrency 16
  stop_server
done
# Continuous batching vs one request at a time, same load (16 streams).
start_server 1 --max-num-seqs 1 --max-num-batched-tokens 512
run "ep1_c16_one_at_a_time" "${SHAREGPT[@]}" --num-prompts 64 --max-concurrency 16
stop_server
# The cost of batch-invariant kernels (sgemm prefill and batched GEMV without them).
start_server 1 --batch-invariant false
run "ep1_c16_not_invariant" "${SHAREGPT[@]}" --num-prompts 64 --max-concurrency 16
stop_server
# The Azure LLM inference conversation trace (Splitwise), by arrival time sped up 20x,
# token counts scaled to the 512-token context.
start_server 1
run "ep1_trace_conv_x20" --dataset "$DATA/vidur_splitwise_conv.csv" --num-prompts 200 --trace-time-scale 20 \
  --trace-token-scale 0.25 --goodput ttft:500 tpot:50
stop_server
