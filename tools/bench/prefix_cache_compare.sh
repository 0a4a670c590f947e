#!/usr/bin/env bash
# Multi-turn replay against three servers, interleaved per round: moe serve with prefix
# caching (the default), moe serve with --no-enable-prefix-caching, and (when a GGUF is
# given) llama-server with its prompt cache (cache_prompt, its default). Each run starts a
# fresh server, replays `moe bench serve --workload multi-turn` and writes its
# --result-json to OUT/<round>-<server>.json; the summary prints each run's turn-1 and
# turns-2+ median TTFT and the cached share of prompt tokens on turns 2+.
#
# Usage: tools/bench/prefix_cache_compare.sh MOE MODEL_DIR OUT [ROUNDS] [GGUF LLAMA_SERVER]
#   env: CONVS (8), TURNS (4), OUTPUT_LEN (16), THREADS (2), DATASET (ShareGPT JSON; default
#   the shared 500-prompt file; "none": synthetic 32-word messages), MAX_MODEL_LEN (4096),
#   EXTRA_MOE_ARGS (e.g. "--matmul-precision medium").
set -euo pipefail
MOE=$1 MODEL=$2 OUT=$3 ROUNDS=${4:-2} GGUF=${5:-} LLAMA=${6:-}
CONVS=${CONVS:-8} TURNS=${TURNS:-4} OUTPUT_LEN=${OUTPUT_LEN:-16} THREADS=${THREADS:-2}
DATASET=${DATASET:-$(dirname "$0")/../../../shared/data/prompts/sharegpt_v3_filtered_500.json}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-4096}
DATASET_ARGS=(--dataset "$DATASET")
[ "$DATASET" = none ] && DATASET_ARGS=()
mkdir -p "$OUT"
PORT=18610
wait_up() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "server on port $PORT did not come up" >&2
  return 1
}
run_one() {  # name, then the server command (a fresh port each run: no TIME_WAIT clash)
  local name=$1; shift
  PORT=$((PORT + 1))
  "$@" > "$OUT/$name.server.log" 2>&1 &
  local pid=$!
  wait_up
  "$MOE" bench serve --base-url "http://127.0.0.1:$PORT" --tokenizer "$MODEL" --workload multi-turn \
    --num-conversations "$CONVS" --turns "$TURNS" --default-output-len "$OUTPUT_LEN" --max-concurrency 1 \
    "${DATASET_ARGS[@]}" --seed 1 --ignore-eos --temperature 0 --max-model-len "$MAX_MODEL_LEN" --disable-progress \
    --result-json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  kill "$pid"; wait "$pid" 2> /dev/null || true
}
for r in $(seq 1 "$ROUNDS"); do
  run_one "$r-moe-cache" "$MOE" serve --model "$MODEL" --port "$((PORT + 1))" --threads "$THREADS" ${EXTRA_MOE_ARGS:-}
  run_one "$r-moe-nocache" "$MOE" serve --model "$MODEL" --port "$((PORT + 1))" --threads "$THREADS" \
    --no-enable-prefix-caching ${EXTRA_MOE_ARGS:-}
  if [ -n "$GGUF" ]; then
    run_one "$r-llama" "$LLAMA" -m "$GGUF" --port "$((PORT + 1))" -t "$THREADS" -c 8192 -np 1
  fi
done
/usr/bin/python3 - "$OUT" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    j = json.load(open(f))
    name = os.path.basename(f)[:-5]
    rnd, server = name.split("-", 1)
    rows.setdefault(rnd, {})[server] = j
    print(f"{name:18s} turn1 TTFT {j['ttft_turn1_ms_median']:8.1f} ms  turns 2+ TTFT {j['ttft_later_ms_median']:8.1f} ms"
          f"  turns 2+ cached {j.get('prefix_hit_rate_later', 0) * 100:5.1f}%")
for rnd, r in rows.items():
    if "moe-cache" in r and "moe-nocache" in r:
        print(f"round {rnd}: turns 2+ TTFT off/on = {r['moe-nocache']['ttft_later_ms_median'] / r['moe-cache']['ttft_later_ms_median']:.2f}x")
    if "moe-cache" in r and "llama" in r:
        print(f"round {rnd}: turns 2+ TTFT moe(cache)/llama(cache) = {r['moe-cache']['ttft_later_ms_median'] / r['llama']['ttft_later_ms_median']:.2f}x")
EOF
