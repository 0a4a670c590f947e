#!/usr/bin/env bash
# Installs dependencies (Debian 12 packages), builds moe-engine, and runs generation on
# the model shipped in models/. Usage: ./scripts/setup.sh [--no-run]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenblas-openmp-dev      # GEMM (sgemm), OpenMP build
  libdnnl-dev                 # oneDNN: bf16 prefill GEMM (--matmul-precision medium)
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
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

echo "==> building (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"

if [ "${1:-}" != "--no-run" ]; then
  echo "==> generating with the shipped model (models/tiny-mixtral-shakespeare), experts split over 2 MPI ranks"
  mpirun --allow-run-as-root --oversubscribe -np 2 \
    ./build/moe generate --ep 2 --prompt "ROMEO:" --max-tokens 64 --temperature 0.8 --seed 42 --threads 1
fi
