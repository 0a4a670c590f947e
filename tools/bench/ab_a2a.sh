#!/usr/bin/env bash
# Interleaved A/B of two `moe` binaries on `moe bench a2a` under mpirun (A, B, A, B, ...):
# per round, each binary's "ours ms" (our EP layer's dispatch + combine, median of the
# slowest rank) per (hidden, tokens) row; then the median B/A ratio per row.
# Usage: tools/bench/ab_a2a.sh OLD_MOE NEW_MOE ROUNDS NP [bench a2a flags...]
set -euo pipefail
old=$1 new=$2 rounds=$3 np=$4
shift 4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
rows() {  # "hidden tokens ours_ms" per row of the main tables
  mpirun --oversubscribe -np "$np" "$1" bench a2a "${@:2}" 2> /dev/null |
    awk '/^== hidden/ {h = $3; sub(",", "", h)} /^  tokens/ {t = 1; next} /^$/ {t = 0} t && $1 ~ /^[0-9]+$/ {print h, $1, $4}'
}
for ((i = 1; i <= rounds; i++)); do
  rows "$old" "$@" > "$out/a.$i"
  rows "$new" "$@" > "$out/b.$i"
done
python3 - "$out" "$rounds" <<'PY'
import statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
def load(p):
    return {(h, t): float(ms) for h, t, ms in (l.split() for l in open(p) if l.strip())}
a = [load(f"{d}/a.{i}") for i in range(1, n + 1)]
b = [load(f"{d}/b.{i}") for i in range(1, n + 1)]
print(f"{'hidden':>7} {'tokens':>7} {'A ms (median)':>14} {'B ms (median)':>14} {'B/A':>6}")
for key in a[0]:
    am = statistics.median(x[key] for x in a)
    bm = statistics.median(x[key] for x in b)
    r = statistics.median(y[key] / x[key] for x, y in zip(a, b))
    print(f"{key[0]:>7} {key[1]:>7} {am:>14.3f} {bm:>14.3f} {r:>6.3f}")
PY
rm -rf "$out"
