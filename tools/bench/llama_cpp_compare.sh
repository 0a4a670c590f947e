#!/usr/bin/env bash
# moe-engine against llama.cpp on the same model, dtype, threads, prompt and output
# lengths, interleaved round by round (llama bf16, moe bf16, llama q8_0, moe int8, ...),
# then the median of each engine's tok/s and of the per-round ratios. Decode is measured
# after a prompt of the same length in both (llama-bench: tg at depth P).
#
# Usage: tools/bench/llama_cpp_compare.sh LLAMA_BUILD_BIN MOE MODEL_DIR GGUF_PREFIX ROUNDS
#          [THREADS (default "1 2")] [PROMPT (256)] [GEN (64)]
#   GGUF_PREFIX: GGUF files GGUF_PREFIX-bf16.gguf and GGUF_PREFIX-q8_0.gguf, made by
#   tools/bench/hf_to_gguf.py from MODEL_DIR (llama.cpp itself is not part of this repo:
#   build a snapshot CPU-only with GGML_NATIVE=ON next to it; docs/performance.md).
# e.g. tools/bench/llama_cpp_compare.sh /work/llama.cpp/build/bin ./build/moe \
#        /work/models/bench-mixtral-579m /work/gguf/bench579m 5
#   env MOE_ARGS: extra flags for moe bench generate (e.g. "--kernels avx2" against a llama.cpp
#   built with GGML_NATIVE=OFF GGML_AVX2=ON GGML_AVX512=OFF: an AVX2-only CPU's code paths)
#   env MOE_BF16_ARGS: extra flags for the bf16 (native) runs only, e.g. "--matmul-precision
#   medium": bf16 activations in prefill, as llama.cpp's bf16 matmul rounds them too
set -euo pipefail
llama=$1 moe=$2 model=$3 gguf=$4 rounds=$5
threads=${6:-"1 2"} prompt=${7:-256} gen=${8:-64}
# tok/s of one llama-bench test (csv: avg_ts is the mean over -r repetitions)
llama_ts() {  # model threads extra-args...
  "$llama/llama-bench" -m "$1" -t "$2" -r 1 -o csv "${@:3}" 2> /dev/null |
    python3 -c 'import csv,sys; r=list(csv.DictReader(sys.stdin)); print(r[-1]["avg_ts"])'
}
moe_row() {  # threads weights -> "prefill decode bound" (medians of 1 repeat, bound from the probe)
  local extra=${MOE_ARGS:-}
  [ "$2" = native ] && extra="$extra ${MOE_BF16_ARGS:-}"
  "$moe" bench generate --model "$model" --threads "$1" --weights "$2" $extra --prompt-tokens "$prompt" \
    --gen-tokens "$gen" --repeats 1 --bw-buffer-mb 256 2> /dev/null |
    awk '/prefill min/ {getline; getline; p=$3; d=$5} /bound tok\/s/ {getline; b=$3} END {print p, d, b}'
}
out=$(mktemp)
echo "model $model, prompt $prompt, gen $gen, $rounds rounds; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
printf "%-5s %-3s %-10s %12s %12s %12s\n" round t engine "prefill" "decode" "bound"
for ((i = 1; i <= rounds; i++)); do
  for t in $threads; do
    for pair in "bf16 native" "q8_0 int8"; do
      set -- $pair
      lp=$(llama_ts "$gguf-$1.gguf" "$t" -p "$prompt" -n 0)
      ld=$(llama_ts "$gguf-$1.gguf" "$t" -p 0 -n "$gen" -d "$prompt")
      read -r mp md mb < <(moe_row "$t" "$2")
      printf "%-5s %-3s %-10s %12.1f %12.1f %12s\n" "$i" "$t" "llama-$1" "$lp" "$ld" "-"
      printf "%-5s %-3s %-10s %12.1f %12.1f %12.1f\n" "$i" "$t" "moe-$2" "$mp" "$md" "$mb"
      echo "$t $1 $lp $ld $mp $md $mb" >> "$out"
    done
  done
done
python3 - "$out" << 'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print("\nmedians over rounds (tok/s) and median per-round ratios moe/llama; decode as % of moe's bandwidth bound")
print(f"{'t':>2} {'dtype':>10} {'llama pp':>9} {'moe pp':>9} {'ratio':>6} {'llama tg':>9} {'moe tg':>9} {'ratio':>6} "
      f"{'llama %bw':>9} {'moe %bw':>8}")
for key in sorted({(r[0], r[1]) for r in rows}):
    rs = [list(map(float, r[2:])) for r in rows if (r[0], r[1]) == key]
    med = lambda i: statistics.median(r[i] for r in rs)
    rp = statistics.median(r[2] / r[0] for r in rs)
    rd = statistics.median(r[3] / r[1] for r in rs)
    label = key[1] + ("/bf16" if key[1] == "bf16" else "/int8")
    print(f"{key[0]:>2} {label:>10} {med(0):9.1f} {med(2):9.1f} {rp:6.2f} {med(1):9.1f} {med(3):9.1f} {rd:6.2f} "
          f"{100 * med(1) / med(4):8.0f}% {100 * med(3) / med(4):7.0f}%")
PY
rm -f "$out"
