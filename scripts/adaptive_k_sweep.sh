#!/usr/bin/env bash
# The adaptive top-k measurement of docs/performance.md ("Adaptive top-k"): held-out
# Tiny Shakespeare NLL of the shipped tiny Mixtral under 2 EP ranks (mpirun), with the
# all-to-all bytes rank 0 sent, for k = 2, k = 1, adaptive k at several load targets and
# the capacity policies; then the plot (scripts/plot_adaptive_k.py).
# Usage: scripts/adaptive_k_sweep.sh TINYSHAKESPEARE.txt OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
TEXT=$1
OUT=$2
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {
  local name=$1
  shift
  mpirun -np 2 --oversubscribe ./build/moe bench perplexity --ep 2 --threads 1 --text "$TEXT" --batch 4 \
    --json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: $(grep -E 'NLL|experts per|bytes' "$OUT/$name.log" | tr '\n' ' ')"
}
run k2
run k1 --adaptive-k --max-k 1
run F1.25 --adaptive-k --adaptive-k-target 1.25
run F1.0 --adaptive-k --adaptive-k-target 1.0
run F0.75 --adaptive-k --adaptive-k-target 0.75
run F0.5 --adaptive-k --adaptive-k-target 0.5
run requeue0.75 --overflow-policy adaptive_requeue --capacity-factor 0.75
run drop0.75 --overflow-policy drop --capacity-factor 0.75
/usr/bin/python3 scripts/plot_adaptive_k.py "$OUT/adaptive_k" "k=2=$OUT/k2.json" "k=1=$OUT/k1.json" \
  "F=1.25=$OUT/F1.25.json" "F=1.0=$OUT/F1.0.json" "F=0.75=$OUT/F0.75.json" "F=0.5=$OUT/F0.5.json"
