#!/usr/bin/env bash
# Checks of scripts/fresh_root.sh and of setup.sh's failure on an unreachable archive, on
# the complete root at $MOE_FRESH_ROOT (made by `fresh_root.sh create`, before setup.sh
# has installed anything in it). CI runs it right after create.
#   1. `run` killed by SIGKILL: no process and no mount is left, in any mount namespace.
#   2. `remove` while `run` uses the root: refused, naming the process.
#   3. A half-built root (an interrupted create): `run` refuses it, `create` replaces it.
#   4. setup.sh without a reachable package archive: a message naming apt, exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${MOE_FRESH_ROOT:-/var/tmp/moe-fresh-root}
export MOE_FRESH_ROOT=$ROOT
FR=scripts/fresh_root.sh
failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAILED: $*" >&2; failures=$((failures + 1)); }

# PIDs whose root is inside the root; PIDs in mount namespace $1.
root_users() {
  local p
  for p in /proc/[0-9]*; do
    case "$(readlink "$p/root" 2> /dev/null)" in "$ROOT" | "$ROOT"/*) echo "${p#/proc/}" ;; esac
  done
}
in_namespace() {
  local p
  for p in /proc/[0-9]*; do [ "$(readlink "$p/ns/mnt" 2> /dev/null)" != "$1" ] || echo "${p#/proc/}"; done
}
wait_for_users() {
  local i
  for i in $(seq 100); do
    [ -z "$(root_users)" ] || return 0
    sleep 0.1
  done
  return 1
}

$FR status > /dev/null || { echo "no complete root at $ROOT: run $FR create first" >&2; exit 1; }

# 1. SIGKILL of run.
$FR run sleep 600 &
run_pid=$!
if wait_for_users; then
  # The mounts live in run's own mount namespace: gone once no process is in it.
  inner=$(root_users | head -1)
  ns=$(readlink "/proc/$inner/ns/mnt")
  [ "$ns" != "$(readlink /proc/self/ns/mnt)" ] || fail "kill: run's command is in the host's mount namespace"
  awk '$5 == "/proc" {found = 1} END {exit !found}' "/proc/$inner/mountinfo" || fail "kill: no /proc mounted inside the root (is the check blind?)"
  kill -9 "$run_pid"
  wait "$run_pid" 2> /dev/null || true
  sleep 1
  left_procs=$(root_users | tr '\n' ' ')
  left_ns=$(in_namespace "$ns" | tr '\n' ' ')
  host_mounts=$(findmnt -rn -o TARGET | grep -F "$ROOT/" || true)
  [ -z "$left_procs" ] && [ -z "$left_ns" ] && [ -z "$host_mounts" ] &&
    pass "run killed by SIGKILL leaves no process, no mount namespace and no mount" ||
    fail "run killed by SIGKILL left processes [$left_procs], namespace users [$left_ns], mounts [$host_mounts]"
else
  fail "kill: run never started its command in the root"
  kill -9 "$run_pid" 2> /dev/null || true
fi

# 2. remove while in use.
$FR run sleep 600 &
run_pid=$!
if wait_for_users; then
  if out=$($FR remove 2>&1); then
    fail "remove while in use succeeded: $out"
  else
    [[ "$out" == *"in use by process"* ]] && pass "remove refuses a root in use" || fail "remove in use said: $out"
  fi
  [ -f "$ROOT/etc/moe-fresh-root" ] || fail "remove in use deleted the root"
fi
kill -9 "$run_pid" 2> /dev/null || true
wait "$run_pid" 2> /dev/null || true

# 3. Half-built root, in a scratch location with a stand-in for mmdebstrap.
scratch=$(mktemp -d /var/tmp/moe-fresh-test.XXXXXX)
trap 'rm -rf --one-file-system "$scratch"' EXIT
fake=$scratch/fake-mmdebstrap
cat > "$fake" << 'EOF'
#!/bin/sh
# Makes an (empty) root at the argument after the suite, as mmdebstrap would.
prev=""
for a in "$@"; do [ "$prev" = bookworm ] && mkdir -p "$a/etc"; prev=$a; done
EOF
chmod +x "$fake"
half=$scratch/root
mkdir -p "$half.partial/usr" && touch "$half.partial/usr/leftover"
if out=$(MOE_FRESH_ROOT=$half MOE_FRESH_CACHE=$scratch/cache $FR run true 2>&1); then
  fail "run on a half-built root succeeded"
else
  [[ "$out" == *"half-built"* ]] && pass "run refuses a half-built root" || fail "run on a half-built root said: $out"
fi
out=$(MOE_FRESH_ROOT=$half MOE_FRESH_CACHE=$scratch/cache MOE_FRESH_MMDEBSTRAP=$fake $FR create 2>&1) ||
  fail "create over a half-built root failed: $out"
[[ "$out" == *"half-built root left by an interrupted create: removing it"* ]] &&
  [ -f "$half/etc/moe-fresh-root" ] && [ ! -e "$half.partial" ] && [ ! -e "$half/usr/leftover" ] &&
  pass "create replaces a half-built root" || fail "create over a half-built root: $out"

# 4. setup.sh offline (nothing is installed in the root yet, so it must reach apt).
if $FR run sh -c 'command -v cmake' > /dev/null; then
  echo "SKIPPED: setup.sh offline (setup.sh has already installed packages in this root; run create first)"
elif out=$($FR run --offline ./scripts/setup.sh --no-run 2>&1); then
  fail "setup.sh without a package archive succeeded"
else
  [[ "$out" == *"setup.sh: apt could not reach the package archive"* ]] &&
    pass "setup.sh without a package archive fails naming apt" ||
    fail "setup.sh without a package archive said: $(echo "$out" | tail -3)"
fi

[ "$failures" = 0 ] || { echo "$failures fresh-root check(s) failed" >&2; exit 1; }
