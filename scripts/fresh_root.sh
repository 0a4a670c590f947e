#!/usr/bin/env bash
# A minimal Debian 12 root for trying the README's set-up as a new machine would: nothing
# the host installed is visible inside it (no bind mount of /usr, /opt or $HOME), only the
# checkout, the data folder beside it (../shared, read-only, when present: models and
# traces some tests read), a package cache and an npm cache. CI (.ci/run) runs every
# stage inside one.
#
# Usage (as root):
#   scripts/fresh_root.sh create            make a new root (mmdebstrap --variant=minbase);
#                                           an existing or half-built one is replaced
#   scripts/fresh_root.sh run [--offline] [--] CMD [ARG...]
#                                           run CMD inside the root, in the checkout, with
#                                           /proc, /sys, /dev and a private /dev/shm mounted;
#                                           --offline: in an empty network namespace
#   scripts/fresh_root.sh remove            delete the root (refused while a process uses it)
#   scripts/fresh_root.sh status            say whether the root exists and is complete
#
# Environment:
#   MOE_FRESH_ROOT    where the root lives (default /var/tmp/moe-fresh-root)
#   MOE_FRESH_CACHE   where the caches shared with the root live: DIR/apt (downloaded .deb
#                     files, seeded from the host's /var/cache/apt/archives at create) and
#                     DIR/npm (npm's cache) and DIR/ccache (compiled objects, so a CI run
#                     after the first recompiles only what changed; a missing header still
#                     fails, as ccache preprocesses on a miss). Default:
#                     /var/cache/moe-fresh-root/{apt,ccache}, which survive the host's apt
#                     cleaning its own archive (Debian's docker-clean), and the host's ~/.npm
#   MOE_FRESH_MIRROR  the Debian mirror (default http://deb.debian.org/debian)
#   MOE_FRESH_MMDEBSTRAP  the mmdebstrap command (default mmdebstrap)
#
# A root is built in $MOE_FRESH_ROOT.partial and renamed into place only when mmdebstrap
# has finished, so a root at $MOE_FRESH_ROOT is always complete; a .partial left by a
# killed create is removed by the next create and refused by run.
#
# `run` starts its command in its own mount and PID namespaces (unshare -m -p
# --kill-child): every mount it makes is private to them, and when `run` dies, even by
# SIGKILL, every process inside is killed, so no mount and no process outlives it.
set -euo pipefail

ROOT=${MOE_FRESH_ROOT:-/var/tmp/moe-fresh-root}
if [ -n "${MOE_FRESH_CACHE:-}" ]; then
  APT_CACHE=$MOE_FRESH_CACHE/apt
  NPM_CACHE=$MOE_FRESH_CACHE/npm
  CCACHE_CACHE=$MOE_FRESH_CACHE/ccache
else
  APT_CACHE=/var/cache/moe-fresh-root/apt
  CCACHE_CACHE=/var/cache/moe-fresh-root/ccache
  NPM_CACHE=${HOME:-/root}/.npm
fi
MIRROR=${MOE_FRESH_MIRROR:-http://deb.debian.org/debian}
MMDEBSTRAP=${MOE_FRESH_MMDEBSTRAP:-mmdebstrap}
SRC=$(cd "$(dirname "$0")/.." && pwd)
ME="fresh_root.sh"

die() { echo "$ME: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

need_root() {
  [ "$(id -u)" = 0 ] || die "must run as root (it makes mount namespaces and chroots); try sudo $0 $*"
}

# PIDs of processes whose root directory or working directory is inside the root.
users_of_root() {
  local p link
  for p in /proc/[0-9]*; do
    for link in "$p/root" "$p/cwd"; do
      case "$(readlink "$link" 2> /dev/null || true)" in
        "$ROOT" | "$ROOT"/*) echo "${p#/proc/}"; break ;;
      esac
    done
  done
}

mounts_under_root() {
  findmnt -rn -o TARGET | awk -v r="$ROOT" 'index($0, r "/") == 1 || $0 == r' || true
}

remove_dir() {
  local dir=$1
  [ -e "$dir" ] || return 0
  rm -rf --one-file-system "$dir"
}

cmd_remove() {
  local pids mounts
  pids=$(users_of_root | tr '\n' ' ')
  [ -z "$pids" ] || die "the root $ROOT is in use by process(es) $pids; stop them first"
  mounts=$(mounts_under_root)
  [ -z "$mounts" ] || die "mounts remain under $ROOT, not removing it: $(echo $mounts)"
  remove_dir "$ROOT"
  remove_dir "$ROOT.partial"
  echo "==> removed $ROOT"
}

cmd_create() {
  command -v "${MMDEBSTRAP%% *}" > /dev/null ||
    die "mmdebstrap not found: install it with apt-get install mmdebstrap"
  if [ -e "$ROOT.partial" ]; then
    echo "==> $ROOT.partial is a half-built root left by an interrupted create: removing it"
    remove_dir "$ROOT.partial"
  fi
  if [ -e "$ROOT" ]; then
    echo "==> replacing the existing root $ROOT"
    cmd_remove > /dev/null
  fi
  mkdir -p "$APT_CACHE" "$NPM_CACHE" "$(dirname "$ROOT")"
  # What the host has downloaded already (hard links where the file system allows).
  local deb
  for deb in /var/cache/apt/archives/*.deb; do
    [ -f "$deb" ] && [ ! -e "$APT_CACHE/${deb##*/}" ] || continue
    ln "$deb" "$APT_CACHE/" 2> /dev/null || cp "$deb" "$APT_CACHE/"
  done
  echo "==> creating a minimal Debian 12 (bookworm) root in $ROOT (mmdebstrap, $MIRROR)"
  # The .deb files come from and go back to $APT_CACHE (mmdebstrap's documented cache
  # hooks); the root's sources are the mirror's bookworm, bookworm-updates and security.
  local security=${MIRROR%/debian}/debian-security
  $MMDEBSTRAP --variant=minbase --mode=root --skip=download/empty \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
    --setup-hook="sync-in $APT_CACHE /var/cache/apt/archives/" \
    --customize-hook="sync-out /var/cache/apt/archives $APT_CACHE" \
    bookworm "$ROOT.partial" \
    "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
    "deb $security bookworm-security main"
  date -u +%Y-%m-%dT%H:%M:%SZ > "$ROOT.partial/etc/moe-fresh-root"
  mv "$ROOT.partial" "$ROOT"
  echo "==> root ready: $ROOT ($(du -sh --one-file-system "$ROOT" | cut -f1))"
}

cmd_status() {
  if [ -e "$ROOT.partial" ]; then echo "$ROOT.partial: half-built (an interrupted create)"; fi
  if [ -f "$ROOT/etc/moe-fresh-root" ]; then
    echo "$ROOT: complete, created $(cat "$ROOT/etc/moe-fresh-root")"
  elif [ -e "$ROOT" ]; then
    echo "$ROOT: not a root made by $ME"
    return 1
  else
    echo "$ROOT: absent"
    return 1
  fi
}

# The site's own certificate authorities (/usr/local/share/ca-certificates/*.crt), such
# as a TLS-intercepting egress proxy's: without them nothing in the root can reach an
# https registry (npm). They are trust settings of this network, not installed software;
# they join the root's bundle when its ca-certificates package is (or gets) installed.
trust_site_cas() {
  local crt changed=0
  for crt in /usr/local/share/ca-certificates/*.crt; do
    [ -f "$crt" ] || continue
    mkdir -p "$ROOT/usr/local/share/ca-certificates"
    cmp -s "$crt" "$ROOT/usr/local/share/ca-certificates/${crt##*/}" && continue
    cp "$crt" "$ROOT/usr/local/share/ca-certificates/"
    changed=1
  done
  if [ $changed = 1 ] && [ -x "$ROOT/usr/sbin/update-ca-certificates" ]; then
    chroot "$ROOT" /usr/sbin/update-ca-certificates > /dev/null 2>&1 || true
  fi
}

cmd_run() {
  local net=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --offline) net=(--net); shift ;;
      --) shift; break ;;
      -*) die "run: unknown option $1" ;;
      *) break ;;
    esac
  done
  [ $# -gt 0 ] || die "run: no command given"
  if [ ! -e "$ROOT" ] && [ -e "$ROOT.partial" ]; then
    die "$ROOT.partial is half-built (an interrupted create): run '$0 create' again"
  fi
  [ -f "$ROOT/etc/moe-fresh-root" ] || die "no complete root at $ROOT: run '$0 create' first"
  mkdir -p "$APT_CACHE/partial" "$NPM_CACHE" "$CCACHE_CACHE"
  local workdir=$PWD
  case "$workdir" in "$SRC" | "$SRC"/*) ;; *) workdir=$SRC ;; esac
  # Inside the new namespaces: mount, then chroot with a clean environment (the host's
  # PATH, Python and Node are not the root's).
  trust_site_cas
  SHARED=$(cd "$SRC/.." && pwd)/shared
  # Network settings pass through (proxies; Node's extra CAs: Node reads its own CA list,
  # not the system's, so it is pointed at the root's bundle).
  local v pass=()
  for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -z "${!v:-}" ] || pass+=("$v=${!v}")
  done
  [ -z "${NODE_EXTRA_CA_CERTS:-}" ] || pass+=(NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt)
  # ccache keys on paths relative to the checkout, so a clone elsewhere still hits.
  pass+=(CCACHE_DIR=/root/.cache/ccache "CCACHE_BASEDIR=$SRC")
  export PASS_ENV_LIST="${pass[*]}"
  export ROOT APT_CACHE NPM_CACHE CCACHE_CACHE SRC SHARED workdir
  exec unshare --mount --propagation private --pid --fork --kill-child "${net[@]}" -- \
    /bin/bash -c '
      set -e
      read -r -a PASS_ENV <<< "$PASS_ENV_LIST"
      mount -t proc proc "$ROOT/proc"
      mount --rbind /sys "$ROOT/sys"
      mount --rbind /dev "$ROOT/dev"
      mount -t tmpfs -o mode=1777 tmpfs "$ROOT/dev/shm"
      mkdir -p "$ROOT$SRC" "$ROOT/var/cache/apt/archives" "$ROOT/root/.npm" "$ROOT/root/.cache/ccache"
      mount --bind "$SRC" "$ROOT$SRC"
      mount --bind "$APT_CACHE" "$ROOT/var/cache/apt/archives"
      mount --bind "$NPM_CACHE" "$ROOT/root/.npm"
      mount --bind "$CCACHE_CACHE" "$ROOT/root/.cache/ccache"
      if [ -d "$SHARED" ]; then  # the shared data next to the checkout, read-only
        mkdir -p "$ROOT$SHARED"
        mount --bind "$SHARED" "$ROOT$SHARED"
        mount -o remount,bind,ro "$ROOT$SHARED"
      fi
      cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2> /dev/null || true
      exec chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${PASS_ENV[@]}" \
        /bin/bash -c "cd \"$workdir\" && exec \"\$@\"" bash "$@"
    ' bash "$@"
}

[ $# -gt 0 ] || usage
verb=$1
shift
case "$verb" in
  create) need_root "$verb"; [ $# -eq 0 ] || die "create: unexpected argument $1"; cmd_create ;;
  run) need_root "$verb"; cmd_run "$@" ;;
  remove) need_root "$verb"; cmd_remove ;;
  status) cmd_status ;;
  -h | --help | help) usage ;;
  *) echo "$ME: unknown command '$verb' (create, run, remove, status)" >&2; exit 2 ;;
esac
