#!/usr/bin/env bash
# The disk tier across a supervisor restart: `moe serve --supervise --kv-offload-dir DIR`
# serves a long prompt once, its worker group is killed (SIGKILL to rank 0's worker; the
# supervisor relaunches it), and the same prompt is sent again. With DIR kept, the new
# group reads the prompt's blocks back from disk; the baseline run does the same with
# prefix caching off (a cold recompute). Time = a 1-token completion's wall time (its
# TTFT plus one response). Interleaved per round; prints the times and their ratio.
#
# Usage: tools/bench/kv_disk_restart.sh MOE MODEL_DIR [ROUNDS] [PROMPT_WORDS]
set -euo pipefail
MOE=$1 MODEL=$2 ROUNDS=${3:-3} WORDS=${4:-1200}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
PROMPT=$(/usr/bin/python3 -c "import sys; w='the king and queen of rome shall speak now to all'.split(); print(' '.join(w[i % len(w)] + str(i % 7) for i in range(int(sys.argv[1]))))" "$WORDS")
BODY=$(printf '{"prompt":"%s","max_tokens":1,"temperature":0}' "$PROMPT")
PORT=18900
one() {  # name, serve flags...: prints the 1-token time after a worker restart
  local name=$1; shift
  PORT=$((PORT + 1))
  "$MOE" serve --supervise --model "$MODEL" --port "$PORT" --threads 2 "$@" > "$DIR/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break; sleep 0.1; done
  curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$BODY" -o /dev/null
  sleep 1  # the disk tier's writer catches up
  local worker
  worker=$(curl -s "http://127.0.0.1:$PORT/health" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['worker_pids'][0])")
  kill -9 "$worker"
  sleep 0.5
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && break
    sleep 0.1
  done
  local t
  t=$(curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$BODY" -o "$DIR/$name.out" \
      -w '%{time_total}')
  local cached
  cached=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['usage']['prompt_tokens_details']['cached_tokens'])" "$DIR/$name.out")
  kill "$pid"; wait "$pid" 2> /dev/null || true
  echo "$name $t $cached"
}
for r in $(seq 1 "$ROUNDS"); do
  rm -rf "$DIR/kv"
  one "$r-disk" --kv-offload-dir "$DIR/kv"
  one "$r-cold" --no-enable-prefix-caching
done | tee "$DIR/summary"
/usr/bin/python3 - "$DIR/summary" <<'EOF'
import sys
runs = {}
for line in open(sys.argv[1]):
    name, t, cached = line.split()
    rnd, mode = name.split("-")
    runs.setdefault(rnd, {})[mode] = (float(t), int(cached))
for rnd, r in sorted(runs.items()):
    d, c = r["disk"], r["cold"]
    print(f"round {rnd}: after the restart, disk tier {d[0] * 1000:.0f} ms ({d[1]} cached tokens), "
          f"cold {c[0] * 1000:.0f} ms: {c[0] / d[0]:.2f}x")
EOF
