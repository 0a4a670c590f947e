#!/usr/bin/env bash
# Installs dependencies (Debian 12 packages), builds moe-engine, and runs generation on
# the model shipped in models/. Usage: ./scripts/setup.sh [--no-run]
# MOE_PHASE_LOG=FILE appends "<phase> <seconds>" lines (apt, build) to FILE (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "" | --no-run) ;;
  -h | --help) sed -n '2,3p' "$0" | sed 's/^# //'; exit 0 ;;
  *) echo "setup.sh: unknown option '$1' (usage: ./scripts/setup.sh [--no-run])" >&2; exit 2 ;;
esac
phase_start=$SECONDS
phase_done() {
  [ -z "${MOE_PHASE_LOG:-}" ] || echo "$1 $((SECONDS - phase_start))" >> "$MOE_PHASE_LOG"
  phase_start=$SECONDS
}

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  ccache                      # a second build directory recompiles only what differs (CMake MOE_CCACHE)
  libopenblas-openmp-dev      # GEMM (sgemm), OpenMP build
  libdnnl-dev                 # oneDNN: bf16 prefill GEMM (--matmul-precision medium)
  ocl-icd-opencl-dev          # OpenCL: oneDNN's CMake config requires it (libdnnl-dev only recommends it)
  libsentencepiece-dev        # tokenizer (tokenizer.model)
  libpcre2-dev libutf8proc-dev  # tokenizer.json: pre-tokenizer regexes, NFC normalization
  libxxhash-dev               # checksums / model fingerprints / store shard hashes
  libzstd-dev                 # checkpoint-store compression (src/moe/store/)
  xxhash zstd                 # xxhsum and zstd CLIs: independent references in the store tests
  nlohmann-json3-dev libcli11-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin  # MPI backend of the communicator (src/moe/comm/)
  libgloo-dev                 # Gloo backend of the communicator (re-forms after a peer dies)
  libcpp-httplib-dev          # HTTP server/client of `moe serve` and `moe bench serve`
  libyaml-cpp-dev             # --config FILE.yaml (src/moe/config/)
  python3-yaml                # tests/e2e/deploy_k8s_cli_test.cc: the manifests' YAML read back
  librsvg2-dev libpng-dev     # PNG charts (moe stats plot, moe trace summarize --png); libpng decodes them in tests
  curl                        # serving tests
  python3                     # tests/architecture/layering_check.py
  python3-numpy               # independent reference of the byte-plane codec (tests/store/codec_test.cc)
  python3-torch               # independent reference of the logits processing (tests/engine/logits_processor_ref.py)
)
# Node.js + npm for the serving e2e test's `openai` client (scripts/test.sh); kept if
# already installed (e.g. from NodeSource, whose nodejs includes npm).
command -v npm > /dev/null || PACKAGES+=(nodejs npm)
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing: ${missing[*]}"
  # Fail here, naming apt and the packages, rather than in CMake twenty minutes later.
  update_log=$(mktemp)
  trap 'rm -f "$update_log"' EXIT
  if ! $SUDO apt-get update -qq 2>&1 | tee "$update_log"; then
    echo "setup.sh: 'apt-get update' failed (see above); these packages are still needed: ${missing[*]}" >&2
    exit 1
  fi
  unavailable=()
  for p in "${missing[@]}"; do
    candidate=$(apt-cache policy "$p" 2> /dev/null | awk '/Candidate:/ {print $2}')
    [ -n "$candidate" ] && [ "$candidate" != "(none)" ] || unavailable+=("$p")
  done
  if [ ${#unavailable[@]} -gt 0 ]; then
    if grep -q "Failed to fetch" "$update_log"; then
      echo "setup.sh: apt could not reach the package archive ($(grep -m1 -o 'Failed to fetch.*' "$update_log"));" \
           "cannot install: ${unavailable[*]}" >&2
    else
      echo "setup.sh: apt has no installable version of: ${unavailable[*]}" \
           "(is Debian 12 bookworm main in /etc/apt/sources.list*?)" >&2
    fi
    exit 1
  fi
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    echo "setup.sh: 'apt-get install' failed for: ${missing[*]}" >&2
    exit 1
  fi
fi
phase_done apt

echo "==> building (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
phase_done build

if [ "${1:-}" != "--no-run" ]; then
  echo "==> generating with the shipped model (models/tiny-mixtral-shakespeare), experts split over 2 MPI ranks"
  mpirun --allow-run-as-root --oversubscribe -np 2 \
    ./build/moe generate --ep 2 --prompt "ROMEO:" --max-tokens 64 --temperature 0.8 --seed 42 --threads 1
fi
