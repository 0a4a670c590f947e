#!/usr/bin/env bash
# The parallel layouts' end-to-end comparison on 4 ranks: `moe serve` under mpirun -np 4 as pure EP
# (--ep 4), hybrid TP 2 x EP 2 on two emulated nodes (fused RS->A2A->AG, and AR then A2A)
# and pure TP (--tp 4), each measured with `moe bench serve` on the same ShareGPT
# requests. Rounds are interleaved (every strategy once per round, in turn), and each
# figure is reported as its median over the rounds plus the median per-round ratio to
# pure EP. Results in $OUT/<strategy>_r<round>.json. SET=dp compares DP-attention (below);
# NUM_PROMPTS (16) and CONCURRENCY (8) size the workload.
# Usage: tools/bench/parallel_serve.sh MODEL_DIR [ROUNDS] [OUT_DIR]  (repository root, after building)
set -euo pipefail
MODEL=${1:?model directory}
ROUNDS=${2:-2}
OUT=${3:-build/bench-parallel}
mkdir -p "$OUT"
MOE=./build/moe
DATA=${MOE_SHARED:-../shared}/data/prompts
PORT=18157
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 4)
NAMES=(ep4 hybrid_fused hybrid_unfused tp4)
FLAGS=("--ep 4 --ranks-per-node 2" "--tp 2 --ep 2 --ranks-per-node 2 --fused-moe on"
       "--tp 2 --ep 2 --ranks-per-node 2 --fused-moe off" "--tp 4")
# SET=dp: DP-attention against driver-only attention, each layout with and without
# --dp-attention on (interleaved the same way); a second table gives the per-round ratio
# of each *_dp strategy to its driver-only twin.
if [ "${SET:-}" = dp ]; then
  NAMES=(ep4 ep4_dp hybrid_fused hybrid_fused_dp hybrid_unfused hybrid_unfused_dp)
  FLAGS=("--ep 4 --ranks-per-node 2" "--ep 4 --ranks-per-node 2 --dp-attention on"
         "--tp 2 --ep 2 --ranks-per-node 2 --fused-moe on" "--tp 2 --ep 2 --ranks-per-node 2 --fused-moe on --dp-attention on"
         "--tp 2 --ep 2 --ranks-per-node 2 --fused-moe off" "--tp 2 --ep 2 --ranks-per-node 2 --fused-moe off --dp-attention on")
fi
NUM_PROMPTS=${NUM_PROMPTS:-16} CONCURRENCY=${CONCURRENCY:-8}

for r in $(seq 1 "$ROUNDS"); do
  for i in "${!NAMES[@]}"; do
    name=${NAMES[$i]}
    # shellcheck disable=SC2086
    "${MPIRUN[@]}" $MOE serve --model "$MODEL" --port $PORT --threads 1 --comm-timeout 120 ${FLAGS[$i]} \
      > "$OUT/${name}_server.log" 2>&1 &
    server=$!
    for _ in $(seq 1 600); do grep -q "serving " "$OUT/${name}_server.log" 2>/dev/null && break; sleep 0.2; done
    grep -q "serving " "$OUT/${name}_server.log" || { echo "$name did not start:"; cat "$OUT/${name}_server.log"; exit 1; }
    $MOE bench serve --base-url http://127.0.0.1:$PORT --tokenizer "$MODEL" --disable-progress \
      --dataset "$DATA/sharegpt_v3_filtered_500.json" --seed 0 --num-prompts "$NUM_PROMPTS" --max-concurrency "$CONCURRENCY" \
      --sharegpt-output-len 32 --ignore-eos --max-model-len 1024 --result-json "$OUT/${name}_r$r.json" \
      > "$OUT/${name}_r$r.txt" 2>&1
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    echo "round $r: $name done" >&2
  done
done

/usr/bin/python3 - "$OUT" "$ROUNDS" "${NAMES[@]}" <<'PY'
import json, statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
keys = [("output_throughput", "out tok/s"), ("request_throughput", "req/s"), ("mean_ttft_ms", "TTFT mean ms"),
        ("mean_tpot_ms", "TPOT mean ms")]
d = {n: [json.load(open(f"{out}/{n}_r{r}.json")) for r in range(1, rounds + 1)] for n in names}
print("| strategy | done | " + " | ".join(k[1] for k in keys) + " | " +
      " | ".join(k[1] + " / EP 4" for k in keys) + " |")
print("|---" * (2 + 2 * len(keys)) + "|")
for n in names:
    med = [statistics.median(x[k] for x in d[n]) for k, _ in keys]
    ratio = [statistics.median(d[n][r][k] / d[names[0]][r][k] for r in range(rounds)) for k, _ in keys]
    done = f"{d[n][0]['completed']}/{d[n][0]['num_prompts']}"
    print(f"| {n} | {done} | " + " | ".join(f"{v:.2f}" for v in med) + " | " +
          " | ".join(f"{v:.2f}" for v in ratio) + " |")
pairs = [(n, n[:-3]) for n in names if n.endswith("_dp") and n[:-3] in d]
if pairs:
    print()
    print("| DP-attention / driver-only | " + " | ".join(k[1] for k in keys) + " |")
    print("|---" * (1 + len(keys)) + "|")
    for n, base in pairs:
        ratio = [statistics.median(d[n][r][k] / d[base][r][k] for r in range(rounds)) for k, _ in keys]
        print(f"| {n} / {base} | " + " | ".join(f"{v:.2f}" for v in ratio) + " |")
PY
