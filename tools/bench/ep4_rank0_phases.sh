#!/bin/bash
# EP 4 decode on the 579M model (driver-only attention), 3 rounds interleaved: f32 rows,
# bf16 rows (--a2a-dtype bf16: 2 KiB a row, under Open MPI's 4 KiB shared-memory eager
# limit) and f32 rows with the eager limit raised to 8 KiB; rank 0's spans per step from
# --trace (docs/history/planner.md, "The planner validation under load").
# Usage: tools/bench/ep4_rank0_phases.sh [MOE (./build/moe)] [MODEL (/work/models/bench-mixtral-579m)]
M=${1:-./build/moe}
MODEL=${2:-/work/models/bench-mixtral-579m}
for round in 1 2 3; do
for v in f32 bf16 f32eager; do
  dt=f32; extra=""
  [ $v = bf16 ] && dt=bf16
  [ $v = f32eager ] && extra="--mca btl_vader_eager_limit 8192"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe $extra -np 4 $M generate --model $MODEL --ep 4 --threads 1 --prompt "the king the king the king" --max-tokens 32 --temperature 0 --a2a-dtype $dt --hugepages off --trace /tmp/ep4_$v.json --format json 2>/dev/null > /dev/null || echo "$round $v failed"; echo "round $round, $v:"
  python3 - /tmp/ep4_$v.json <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))
per = collections.defaultdict(lambda: collections.defaultdict(float))  # pid -> span -> us
steps = collections.Counter()
for e in d["traceEvents"]:
    if e.get("ph") == "X":
        per[e["pid"]][e["name"]] += e["dur"]
        steps[e["pid"]] += e["name"] == "step"
ms = lambda pid, name: per[pid][name] / max(steps[pid], 1) / 1000
print("  rank 0 ms/step: step %.2f attention %.2f wait %.2f own experts %.2f; other ranks' experts %s" % (
    ms(0, "step"), ms(0, "attention"), ms(0, "wait"), ms(0, "expert_compute"),
    " ".join("%.2f" % ms(p, "expert_compute") for p in sorted(per) if p != 0)))
PY
done; done
