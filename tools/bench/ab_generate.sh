#!/usr/bin/env bash
# Interleaved A/B of two `moe` binaries on `moe bench generate` (A, B, A, B, ...): the
# median prefill and decode tok/s of each round, then the median of the B/A ratios.
# Usage: tools/bench/ab_generate.sh OLD_MOE NEW_MOE ROUNDS [bench generate flags...]
# e.g.   tools/bench/ab_generate.sh /tmp/moe-old ./build/moe 5 --threads 2 --repeats 3
set -euo pipefail
old=$1 new=$2 rounds=$3
shift 3
row() {  # prefill_med decode_med of the single thread count measured
  "$1" bench generate --bw-buffer-mb 64 "${@:2}" 2> /dev/null |
    awk '/prefill min/ {getline; getline; print $3, $5; exit}'
}
ratios=()
printf "%-6s %14s %14s %14s %14s\n" round "A prefill" "B prefill" "A decode" "B decode"
for ((i = 1; i <= rounds; i++)); do
  read -r pa da < <(row "$old" "$@")
  read -r pb db < <(row "$new" "$@")
  printf "%-6s %14s %14s %14s %14s\n" "$i" "$pa" "$pb" "$da" "$db"
  ratios+=("$pa $pb $da $db")
done
printf '%s\n' "${ratios[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
pre = statistics.median(b / a for a, b, _, _ in rows)
dec = statistics.median(d / c for _, _, c, d in rows)
print(f"median B/A: prefill {pre:.3f}, decode {dec:.3f} over {len(rows)} interleaved rounds")'
