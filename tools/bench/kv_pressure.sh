#!/usr/bin/env bash
# Concurrency under KV-memory pressure: the pool holds about 4 worst-case requests
# (--kv-cache-tokens = 4 x (prompt + max_tokens)), and N requests with a large max_tokens
# arrive at once; their answers end early at a stop string (a blank line: the shipped
# Shakespeare model ends a speech there), as real answers end long before max_tokens.
# Runs, interleaved per round: blocks on demand with preemption (the default, prefix
# caching off to isolate the policy) against --kv-reserve-max-tokens (prompt + max_tokens
# held from admission). Prints each run's wall time, completion tokens, throughput and
# preemptions, then the per-round ratio.
#
# A model with random weights (the 579M benchmark checkpoint) never ends at a blank line:
# STOP_IDS="100-131" ends answers at any of those token ids instead (32 of a 2048-token
# vocabulary: geometric lengths with a mean near 64 tokens, as if the model chose EOS).
#
# EXTRA_MOE_ARGS: more serve flags (e.g. "--batch-invariant false": the batch-invariant
# kernels cost the same per token at any batch size, so only without them does a larger
# batch raise throughput).
#
# Usage: tools/bench/kv_pressure.sh MOE MODEL_DIR [ROUNDS] [N] [MAX_TOKENS] [POOL_TOKENS]
set -euo pipefail
MOE=$1 MODEL=$2 ROUNDS=${3:-3} N=${4:-32} MAX_TOKENS=${5:-400} POOL=${6:-2048}
STOP='"stop":["\n\n"]'
if [ -n "${STOP_IDS:-}" ]; then
  STOP="\"stop_token_ids\":[$(seq -s, ${STOP_IDS%-*} ${STOP_IDS#*-})]"
fi
PORT=18700
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
PROMPTS=("ROMEO:" "JULIET:" "First Citizen:" "MENENIUS:" "KING RICHARD III:" "HAMLET:" "CORIOLANUS:" "BRUTUS:")
run() {  # name, extra serve flags...
  local name=$1; shift
  PORT=$((PORT + 1))
  "$MOE" serve --model "$MODEL" --port "$PORT" --threads 2 --kv-cache-tokens "$POOL" --max-num-seqs "$N" ${EXTRA_MOE_ARGS:-} "$@" \
    > "$OUT/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break; sleep 0.1; done
  local t0 t1
  t0=$(date +%s.%N)
  for i in $(seq 0 $((N - 1))); do
    p=${PROMPTS[$((i % ${#PROMPTS[@]}))]}
    printf '{"prompt":"%s","max_tokens":%d,"temperature":0.8,"seed":%d,%s}\n' "$p" "$MAX_TOKENS" "$i" "$STOP"
  done | xargs -P "$N" -d '\n' -I{} curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d {} -o /dev/null 2> /dev/null || true
  t1=$(date +%s.%N)
  local metrics
  metrics=$(curl -s "http://127.0.0.1:$PORT/metrics")
  kill "$pid"; wait "$pid" 2> /dev/null || true
  local tokens preempt queue
  tokens=$(echo "$metrics" | awk '/^moe:generation_tokens_total/ {print $2}')
  preempt=$(echo "$metrics" | awk '/^moe:num_preemptions_total/ {print $2}')
  queue=$(echo "$metrics" | awk '/^vllm:request_queue_time_seconds_sum/ {print $2}')
  /usr/bin/python3 -c "import sys; w=float(sys.argv[2])-float(sys.argv[1]); t=float(sys.argv[3]); q=float(sys.argv[5])/$N; print(f'$name wall {w:.2f} s  tokens {t:.0f}  {t/w:.1f} tok/s  mean queue {q:.2f} s  preemptions {sys.argv[4]}')" \
    "$t0" "$t1" "$tokens" "$preempt" "$queue" | tee -a "$OUT/summary"
}
for r in $(seq 1 "$ROUNDS"); do
  run "$r-on-demand" --no-enable-prefix-caching
  run "$r-reserve" --no-enable-prefix-caching --kv-reserve-max-tokens
done
/usr/bin/python3 - "$OUT/summary" <<'EOF'
import re, sys
runs = {}
for line in open(sys.argv[1]):
    name, rest = line.split(" ", 1)
    rnd, mode = name.split("-", 1)
    runs.setdefault(rnd, {})[mode] = float(re.search(r"([\d.]+) tok/s", rest).group(1))
ratios = sorted(r["on-demand"] / r["reserve"] for r in runs.values() if len(r) == 2)
print("throughput on-demand / reserve per round:", " ".join(f"{x:.2f}x" for x in ratios),
      f"(median {ratios[len(ratios) // 2]:.2f}x)")
EOF
