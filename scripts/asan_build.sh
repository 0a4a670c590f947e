# Sourced by scripts/test.sh --sanitize and scripts/fuzz.sh: configures build-asan/, the one
# instrumented build of both. clang (Debian `clang`, with libFuzzer, and `libomp-dev` for
# its OpenMP, and libclang-rt-14-dev, its sanitizer runtimes), installed here when missing; AddressSanitizer + UndefinedBehaviorSanitizer,
# plus libFuzzer's coverage hooks (CMakeLists.txt, MOE_SANITIZE with clang), so the same
# objects serve the unit/MPI tests and the fuzz targets. -O1 -g1 (line tables): what ASan
# recommends, and half the compile time of -O2 -g; assertions on.
asan_configure() {
  # clang's sanitizer and libFuzzer runtimes are libclang-rt-<major>-dev, which clang only
  # recommends (Debian 12: libclang-rt-14-dev).
  local rt="libclang-rt-14-dev"
  if command -v clang > /dev/null; then rt="libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev"; fi
  if ! command -v clang++ > /dev/null || ! dpkg -s libomp-dev > /dev/null 2>&1 || ! dpkg -s "$rt" > /dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "==> installing: clang libomp-dev $rt"
    $sudo apt-get update -qq
    if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang libomp-dev "$rt" > /dev/null; then
      echo "asan_build.sh: 'apt-get install clang libomp-dev $rt' failed" >&2
      return 1
    fi
  fi
  # The e2e tests (processes started through the CLI, mostly waiting on models and
  # sockets) and the benchmarks are built in the Release pass only.
  cmake -S . -B build-asan -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DMOE_SANITIZE=ON \
    -DMOE_BUILD_BENCH=OFF -DMOE_BUILD_E2E_TESTS=OFF > /dev/null
}
