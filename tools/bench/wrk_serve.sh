#!/usr/bin/env bash
# Load test of `moe serve` with wrk (Debian package `wrk`): GET /health and short
# completions (prompt "ROMEO:", max_tokens 4, greedy) at 64 and 256 connections, on the
# shipped model (one process, --threads 1). Prints one markdown row per run: requests/s
# and wrk's latency percentiles (50/90/99 %), plus the non-2xx count.
# Usage: tools/bench/wrk_serve.sh [DURATION_S] [MOE_BINARY]   (from the repository root)
set -euo pipefail
DURATION=${1:-10}
MOE=${2:-./build/moe}
MODEL=models/tiny-mixtral-shakespeare
PORT=${WRK_PORT:-18131}
OUT=$(mktemp -d)
trap 'kill -TERM $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -rf "$OUT"' EXIT
command -v wrk > /dev/null || { echo "wrk not found: apt-get install wrk"; exit 1; }

"$MOE" serve --model $MODEL --port $PORT --threads 1 > "$OUT/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break
  sleep 0.2
done
cat > "$OUT/completion.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"tiny-mixtral-shakespeare","prompt":"ROMEO:","max_tokens":4,"temperature":0}'
LUA

echo "| endpoint | connections | requests/s | p50 | p90 | p99 | non-2xx | errors |"
echo "|---|---|---|---|---|---|---|---|"
for path in /health /v1/completions; do
  for conns in 64 256; do
    script=()
    [ "$path" = /v1/completions ] && script=(-s "$OUT/completion.lua")
    wrk -t 2 -c "$conns" -d "${DURATION}s" --timeout 30s --latency "${script[@]}" "http://127.0.0.1:$PORT$path" \
      > "$OUT/wrk.txt" 2>&1 || true
    /usr/bin/python3 - "$OUT/wrk.txt" "$path" "$conns" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def pct(p):
    m = re.search(r"^\s+%s%%\s+(\S+)" % p, text, re.M)
    return m.group(1) if m else "?"
rps = re.search(r"Requests/sec:\s+(\S+)", text)
non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
errors = re.search(r"Socket errors:(.*)", text)
print(f"| {sys.argv[2]} | {sys.argv[3]} | {rps.group(1) if rps else '?'} | {pct(50)} | {pct(90)} | {pct(99)} | "
      f"{non2xx.group(1) if non2xx else 0} | {errors.group(1).strip() if errors else 0} |")
PY
  done
done
