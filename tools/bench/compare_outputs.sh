#!/usr/bin/env bash
# Checks that two `moe` binaries give bitwise the same greedy tokens and prompt logits
# (for refactors that must not change behaviour): single process (1 and 2 threads,
# batch-invariant kernels on), the Qwen2/Qwen3-MoE test checkpoints, and under mpirun:
# EP 2 flat, EP 2 with overlap, EP 4 as two nodes (hierarchical all-to-all), bf16 wire.
# Usage: tools/bench/compare_outputs.sh OLD_MOE NEW_MOE   (run from the repository root)
set -euo pipefail
old=$1 new=$2
out=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi="mpirun --oversubscribe"
prompt_a="ROMEO:"
prompt_b=$'KING HENRY IV:\nSo shaken as we are, so wan with care,'
cases=(
  "1t|--threads 1|"
  "2t|--threads 2|"
  "inv|--threads 1 --batch-invariant true|"
  "qwen2|--threads 1 --model tests/data/models/random-qwen2-moe|"
  "qwen3|--threads 1 --model tests/data/models/random-qwen3-moe|"
  "ep2|--threads 1 --ep 2|$mpi -np 2"
  "ep2ov|--threads 1 --ep 2 --ep-overlap|$mpi -np 2"
  "ep4hier|--threads 1 --ep 4 --ranks-per-node 2|$mpi -np 4"
  "ep2bf16|--threads 1 --ep 2 --a2a-dtype bf16|$mpi -np 2"
)
fail=0
for c in "${cases[@]}"; do
  IFS='|' read -r name flags launcher <<< "$c"
  for p in a b; do
    prompt=$([ $p = a ] && echo "$prompt_a" || echo "$prompt_b")
    for bin in old new; do
      exe=${!bin}
      # shellcheck disable=SC2086
      $launcher "$exe" generate $flags --prompt "$prompt" --max-tokens 32 --temperature 0 --format json \
        --logits-out "$out/$name.$p.$bin.f32" 2> /dev/null | grep '^{' | python3 -c \
        'import json,sys; print(json.load(sys.stdin)["output_token_ids"])' > "$out/$name.$p.$bin.tokens"
    done
    if [ -s "$out/$name.$p.new.tokens" ] && cmp -s "$out/$name.$p.old.tokens" "$out/$name.$p.new.tokens" && cmp -s "$out/$name.$p.old.f32" "$out/$name.$p.new.f32"; then
      echo "same   $name prompt $p ($(wc -c < "$out/$name.$p.new.f32") logit bytes, $(tr -cd ',' < "$out/$name.$p.new.tokens" | wc -c) + 1 tokens)"
    else
      echo "DIFFER $name prompt $p"; fail=1
    fi
  done
done
rm -rf "$out"
exit $fail
