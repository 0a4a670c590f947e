#!/usr/bin/env bash
# Planner validation (docs/planner.md): on 4 ranks as 2 emulated nodes of 2, measure the step time
# of every strategy the engine runs (--tp K --ep M, fused on/off) with `moe generate`
# (one request: TTFT from its prompt rate, TPOT from its decode rate) under mpirun, and compare with `moe plan --json` predictions from a profile measured by
# `moe plan calibrate --model` on this machine (per model). Prints predicted, measured and error % per
# strategy, and whether the planner's first choice is the measured best (or within 5%).
#
# Usage: tools/bench/planner_validate.sh [MODEL_DIR ...]
#   default models: /work/models/bench-mixtral-579m /work/models/bench-deepseek-v3-500m
#   env: MOE (binary, default ./build/moe), BATCH (8), INPUT_LEN (64), OUTPUT_LEN (32),
#        THREADS (1 per rank), ROUNDS (2: interleaved repeats, median taken),
#        DP_BATCH (8: prompts of the DP-attention vs driver-only table; 0 = skip it),
#        SINGLE (1; 0 = skip the one-prompt table, e.g. to rerun the batch table alone),
#        KEEP (a directory: the last model's profile.json, plans and raw measurements are copied there)
# The measured figure is (TTFT + OUTPUT_LEN x TPOT) / OUTPUT_LEN of one generate (ms per
# output step, prefill included); the prediction is the same quantity,
# (TTFT + OUTPUT_LEN x TPOT) / OUTPUT_LEN, with --driver-attention (attention runs on the
# driver's TP group, as the engine does).
set -euo pipefail
MOE=${MOE:-./build/moe}
BATCH=${BATCH:-1} INPUT_LEN=${INPUT_LEN:-64} OUTPUT_LEN=${OUTPUT_LEN:-32} THREADS=${THREADS:-1} ROUNDS=${ROUNDS:-2}
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(/work/models/bench-mixtral-579m /work/models/bench-deepseek-v3-500m)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
# KEEP=DIR keeps the last model's profiles, plans and raw measurements there.
trap '[ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp -r "$out"/. "$KEEP"/; rm -rf "$out"' EXIT
MPI=(mpirun --oversubscribe -np 4)
# About INPUT_LEN tokens of prompt for the bench models' tokenizer (one word, one token or two).
PROMPT=$(for ((i = 0; i < INPUT_LEN / 2; i++)); do printf "the king "; done)

# strategies: name tp ep fused ranks_per_node
strategies=("ep4 1 4 off 2" "hybrid-ar 2 2 off 2" "hybrid-fused 2 2 on 2" "tp4 4 1 off 4")

for model in "${models[@]}"; do
  echo "== $model (batch $BATCH, input $INPUT_LEN, output $OUTPUT_LEN, $THREADS thread(s)/rank)"
  # Links per tier and the device, with compute/memory efficiency fitted to this model's own
  # prefill and decode (every rank at once, as under EP).
  echo "calibrating (4 ranks, 2 emulated nodes of 2)..." >&2
  [ "${SINGLE:-1}" = 0 ] || "${MPI[@]}" "$MOE" plan calibrate --ranks-per-node 2 --threads "$THREADS" --model "$model" \
      --prompt-tokens "$INPUT_LEN" --gen-tokens 16 --out "$out/profile.json" >&2
  # TP 4 runs as one node of 4 (a TP group stays inside a node); calibrate needs two nodes,
  # so its plan uses the same profile's intra-node tier for the 4-rank node.
  # The engine exchanges f32 activations and keeps an f32 KV cache by default.
  common=(--model "$model/config.json" --batch "$BATCH" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --driver-attention
          --activation-bytes 4 --kv-bytes 4 --prefill-chunk 512 --json)
  if [ "${SINGLE:-1}" != 0 ]; then
  "$MOE" plan "${common[@]}" --profile "$out/profile.json" --nodes 2 --devices-per-node 2 > "$out/plan2.json"
  "$MOE" plan "${common[@]}" --profile "$out/profile.json" --nodes 1 --devices-per-node 4 > "$out/plan4.json" || echo '{"feasible": []}' > "$out/plan4.json"
  fi
  : > "$out/measured"
  for ((round = 1; round <= ROUNDS * ${SINGLE:-1}; round++)); do
    for s in "${strategies[@]}"; do
      read -r name tp ep fused rpn <<< "$s"
      # One request: TTFT from the prompt rate, TPOT from the decode rate (generate's summary).
      line=$("${MPI[@]}" "$MOE" generate --model "$model" --prompt "$PROMPT" --max-tokens "$OUTPUT_LEN" \
               --temperature 0 --threads "$THREADS" --tp "$tp" --ep "$ep" --fused-moe "$fused" \
               --ranks-per-node "$rpn" 2>&1 >/dev/null | grep '^\[prompt ' | tail -1) || true
      # "[prompt N tokens, X tok/s | generated M tokens, Y tok/s | ...]" -> seconds for OUTPUT_LEN steps
      secs=$(echo "$line" | awk -v o="$OUTPUT_LEN" '{gsub(/[\[,|]/, " "); print $2 / $4 + o / $9}')
      [ -n "$line" ] && echo "$name $tp $ep $fused $secs" >> "$out/measured" || echo "  $name: run failed" >&2
    done
  done
  [ "${SINGLE:-1}" = 0 ] || python3 - "$out" "$OUTPUT_LEN" <<'PY'
import json, statistics, sys
d, O = sys.argv[1], int(sys.argv[2])
plans = {2: json.load(open(f"{d}/plan2.json")), 4: json.load(open(f"{d}/plan4.json"))}
def predicted(tp, ep, fused):
    plan = plans[4] if ep == 1 else plans[2]
    for r in plan["feasible"]:
        s = r["strategy"]
        if s["moe_tp"] == tp and s["moe_ep"] == ep and s["fused"] == fused and (tp == 1 or s["attention_tp"] == tp):
            if tp == 1 and s["attention_tp"] != 1:
                continue
            return (r["ttft_ms"] + O * r["tpot_ms"]) / O, plan["feasible"].index(r) + 1
    return None, None
meas = {}
for line in open(f"{d}/measured"):
    name, tp, ep, fused, secs = line.split()
    meas.setdefault((name, int(tp), int(ep), fused == "on"), []).append(float(secs) * 1e3 / O)
rows = []
print(f"{'strategy':<14} {'pred ms/step':>12} {'meas ms/step':>12} {'error %':>8} {'plan rank':>9}  rounds (ms/step)")
for (name, tp, ep, fused), v in meas.items():
    m = statistics.median(v)
    p, rank = predicted(tp, ep, fused)
    err = (p - m) / m * 100 if p else float("nan")
    rows.append((name, p, m, err, rank))
    print(f"{name:<14} {p if p else float('nan'):>12.2f} {m:>12.2f} {err:>8.1f} {rank if rank else '-':>9}  "
          + " ".join(f"{x:.2f}" for x in v))
if rows:
    best = min(rows, key=lambda r: r[2])
    cands = [r for r in rows if r[1]]
    choice = min(cands, key=lambda r: r[1]) if cands else None
    within = choice and choice[2] <= best[2] * 1.05
    print(f"measured best: {best[0]} ({best[2]:.2f} ms); planner's choice among these: "
          f"{choice[0] if choice else '-'} ({choice[2]:.2f} ms measured) -> {'OK' if within else 'NOT within 5%'}")
    worst = max((abs(r[3]) for r in rows if r[1]), default=float("nan"))
    print(f"max |error| {worst:.1f}% ({'within' if worst <= 15 else 'outside'} the 15% target)")
PY
  [ "${DP_BATCH:-8}" -gt 0 ] || continue
  # DP-attention against driver-only attention: DP_BATCH prompts generated together
  # (moe generate --prompts-file, continuous batching; the scheduler spreads them over the
  # groups), ms per step = the batch's seconds / OUTPUT_LEN; predicted with --batch
  # DP_BATCH, --driver-attention for the driver-only rows and without it for DP.
  B=${DP_BATCH:-8}
  for ((i = 0; i < B; i++)); do echo "$PROMPT $i"; done > "$out/prompts.txt"
  # The efficiencies refitted at this workload's prefill step (B x INPUT_LEN tokens, at most
  # the 512-token chunk): GEMM efficiency grows with the rows of a step.
  echo "calibrating at a $((B * INPUT_LEN > 512 ? 512 : B * INPUT_LEN))-token prefill..." >&2
  "${MPI[@]}" "$MOE" plan calibrate --ranks-per-node 2 --threads "$THREADS" --model "$model" \
      --prompt-tokens $((B * INPUT_LEN > 512 ? 512 : B * INPUT_LEN)) --gen-tokens 16 --out "$out/profile.json" >&2
  bcommon=(--model "$model/config.json" --batch "$B" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN"
           --activation-bytes 4 --kv-bytes 4 --prefill-chunk 512 --json)
  "$MOE" plan "${bcommon[@]}" --driver-attention --profile "$out/profile.json" --nodes 2 --devices-per-node 2 > "$out/bplan_drv.json"
  "$MOE" plan "${bcommon[@]}" --profile "$out/profile.json" --nodes 2 --devices-per-node 2 > "$out/bplan_dp.json"
  echo "== $model: DP-attention vs driver-only, batch of $B prompts"
  : > "$out/bmeasured"
  dstrategies=("ep4 1 4 off off" "ep4-dp 1 4 off on" "hybrid-ar 2 2 off off" "hybrid-ar-dp 2 2 off on"
               "hybrid-fused 2 2 on off" "hybrid-fused-dp 2 2 on on")
  for ((round = 1; round <= ROUNDS; round++)); do
    for s in "${dstrategies[@]}"; do
      read -r name tp ep fused dp <<< "$s"
      line=$("${MPI[@]}" "$MOE" generate --model "$model" --prompts-file "$out/prompts.txt" --max-tokens "$OUTPUT_LEN" \
               --temperature 0 --threads "$THREADS" --tp "$tp" --ep "$ep" --fused-moe "$fused" --dp-attention "$dp" \
               --ranks-per-node 2 2>&1 >/dev/null | grep '^\[batch ' | tail -1) || true
      # "[batch N prompts, P prompt tokens, G tokens generated in S s, R tok/s]"
      secs=$(echo "$line" | sed -E 's/.* in ([0-9.]+) s.*/\1/')
      [ -n "$line" ] && echo "$name $tp $ep $fused $dp $secs" >> "$out/bmeasured" || echo "  $name: run failed" >&2
    done
  done
  python3 - "$out" "$OUTPUT_LEN" <<'PY'
import json, statistics, sys
d, O = sys.argv[1], int(sys.argv[2])
plans = {False: json.load(open(f"{d}/bplan_drv.json")), True: json.load(open(f"{d}/bplan_dp.json"))}
def predicted(tp, ep, fused, dp):
    plan = plans[dp]
    for i, r in enumerate(plan["feasible"]):
        s = r["strategy"]
        if (s["attention_tp"], s["attention_dp"], s["moe_tp"], s["moe_ep"], s["fused"]) == (tp, 4 // tp, tp, ep, fused) \
                or (tp == 1 and (s["attention_tp"], s["moe_tp"], s["moe_ep"]) == (1, 1, ep)):
            return (r["ttft_ms"] + O * r["tpot_ms"]) / O, i + 1
    return None, None
meas = {}
for line in open(f"{d}/bmeasured"):
    name, tp, ep, fused, dp, secs = line.split()
    meas.setdefault((name, int(tp), int(ep), fused == "on", dp == "on"), []).append(float(secs) * 1e3 / O)
print(f"{'strategy':<16} {'pred ms/step':>12} {'meas ms/step':>12} {'error %':>8}")
med = {}
for (name, tp, ep, fused, dp), v in meas.items():
    m = statistics.median(v)
    med[name] = m
    p, _ = predicted(tp, ep, fused, dp)
    err = (p - m) / m * 100 if p else float("nan")
    print(f"{name:<16} {p if p else float('nan'):>12.2f} {m:>12.2f} {err:>8.1f}")
for name in [n for n in med if n.endswith("-dp")]:
    base = name[:-3]
    if base in med:
        print(f"{name} / {base}: {med[name] / med[base]:.2f}x the step time")
PY
done
