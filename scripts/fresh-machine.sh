#!/usr/bin/env bash
# fresh-machine.sh: run a command in a clean clone of this repository's HEAD inside a brand-new Debian 12
# root file system, the way a new user's machine starts (docs/DESIGN.md §15). What the
# project's own files do not install is not there, so a missing install step fails here, not on the
# user's machine. .ci/run runs the README's test command through it.
#
#   scripts/fresh-machine.sh                   # README command 1: scripts/setup.sh && build/flatline score
#   scripts/fresh-machine.sh 'scripts/setup.sh && ctest --test-dir build --output-on-failure -j 2'
#   scripts/fresh-machine.sh --cuda 'CMD'      # a GPU runner's image: the host's /usr/local/cuda, read-only
#   scripts/fresh-machine.sh --keep 'CMD'      # keep the root afterwards (its path is printed)
#   scripts/fresh-machine.sh --refresh 'CMD'   # build the root file system anew first
#
# The root: `mmdebstrap --variant=apt` of bookworm (Essential packages, apt and ca-certificates: what a
# minimal Debian 12 install has), cached as a tarball in $FLATLINE_FRESH_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/flatline-fresh-machine) and rebuilt when older than 30 days. Each run
# unpacks it into a new directory under ${TMPDIR:-/var/tmp} (about 10 GB once set up) and:
#  - bind-mounts the root onto itself (so that it is a mount point, as / is on a real machine:
#    `ip netns` needs that), then /proc, /sys, /dev, /dev/pts and /dev/shm;
#  - writes /etc/hosts as the Debian installer does (localhost, the host name), and copies in the host's
#    resolv.conf, CA bundle, pip configuration (and its find-links directory, read-only) and the PIP_*,
#    SSL_CERT_*, REQUESTS_CA_BUNDLE and proxy variables, so that the same package registries are reached;
#  - clones the committed HEAD (uncommitted changes are not taken: commit first) into /root/project and
#    runs the command there as root, with a bare environment (HOME, PATH, LANG, CI=true and the above).
# On every way out (the command's end, an error, SIGINT, SIGTERM, SIGHUP) the processes still running
# in the root are killed, everything mounted under it is unmounted, and the root is deleted, unless
# --keep; a root with anything still mounted is never deleted. Exit status: the command's; 2 for a
# usage or set-up error of this script itself. Needs root (chroot, mounts) and Debian's mmdebstrap and
# zstd, which it installs when missing.
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
cuda=${FRESH_CUDA:-} keep=${FRESH_KEEP:-} refresh=${FRESH_REFRESH:-}
while (($#)); do
  case "$1" in
    --cuda) cuda=1 ;;
    --keep) keep=1 ;;
    --refresh) refresh=1 ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) echo "fresh-machine: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
  shift
done
(($# <= 1)) || { echo "fresh-machine: give the command as one argument (quote it)" >&2; exit 2; }
cmd=${1:-'scripts/setup.sh && build/flatline score'}

fail() { echo "fresh-machine: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || fail "run as root (it uses chroot and bind mounts)"
proj=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || fail "not inside the project's git checkout"
if ! command -v mmdebstrap >/dev/null || ! command -v zstd >/dev/null; then
  echo "fresh-machine: installing mmdebstrap and zstd"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap zstd >/dev/null \
    || fail "cannot install mmdebstrap and zstd"
fi

# --- the cached root file system ------------------------------------------------------------------
cache=${FLATLINE_FRESH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flatline-fresh-machine}
tarball="$cache/bookworm-apt.tar.zst"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9  # one build of the tarball at a time; runs share it read-only afterwards
if [ -n "$refresh" ] || [ ! -s "$tarball" ] || [ -n "$(find "$tarball" -mtime +30 2>/dev/null)" ]; then
  echo "fresh-machine: building a Debian 12 root file system (mmdebstrap --variant=apt; cached in $cache)"
  part="$cache/building.tar.zst"  # mmdebstrap picks the format from the name
  rm -f "$part"
  mmdebstrap --quiet --variant=apt --include=ca-certificates bookworm "$part" \
    "${FRESH_DEBIAN_MIRROR:-http://deb.debian.org/debian}" </dev/null || fail "mmdebstrap failed"
  mv "$part" "$tarball"
fi
flock -u 9

# --- a new root from it ---------------------------------------------------------------------------
root=$(mktemp -d -p "${TMPDIR:-/var/tmp}" flatline-fresh.XXXXXX)
mounts_under() { findmnt -rn -o TARGET | awk -v r="$root" '$0 == r || index($0, r "/") == 1' | sort -r; }
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  # processes whose root is this root (a daemon the command left behind keeps its mounts busy)
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -KILL "${p#/proc/}" 2>/dev/null
  done
  local m
  for m in $(mounts_under); do umount -l "$m" 2>/dev/null || true; done
  if [ -n "$(mounts_under)" ]; then
    echo "fresh-machine: still mounted under $root, not deleting it:" >&2; mounts_under >&2
  elif [ -n "$keep" ]; then
    echo "fresh-machine: kept $root"
  else
    rm -rf --one-file-system "$root"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
tar --zstd -xf "$tarball" -C "$root"
mount --bind "$root" "$root"
for m in proc sys dev dev/pts dev/shm; do mkdir -p "$root/$m"; mount --bind "/$m" "$root/$m"; done

envs=(HOME=/root LANG=C.UTF-8 CI=true)
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if [ -n "$cuda" ]; then
  c=$(readlink -f /usr/local/cuda) && [ -d "$c" ] || fail "--cuda, but this machine has no /usr/local/cuda"
  mkdir -p "$root$c"; mount --bind "$c" "$root$c"; mount -o remount,bind,ro "$root$c"
  [ "$c" = /usr/local/cuda ] || ln -sfn "$c" "$root/usr/local/cuda"
  path=/usr/local/cuda/bin:$path
  envs+=(CUDA_HOME=/usr/local/cuda)
fi
envs+=(PATH=$path)

# The host's view of the registries: names, certificates, pip's configuration and environment.
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$(hostname)" > "$root/etc/hosts"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
for f in /etc/pip.conf "$HOME/.config/pip/pip.conf" "$HOME/.pip/pip.conf"; do
  [ -f "$f" ] && { mkdir -p "$root$(dirname "${f/#$HOME//root}")"; cp -L "$f" "$root${f/#$HOME//root}"; }
done
for v in $(env | cut -d= -f1 | grep -E '^(PIP_[A-Z_]+|SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY)$'); do
  envs+=("$v=${!v}")
done
if [ -n "${PIP_FIND_LINKS:-}" ] && [ -d "$PIP_FIND_LINKS" ]; then
  mkdir -p "$root$PIP_FIND_LINKS"; mount --bind "$PIP_FIND_LINKS" "$root$PIP_FIND_LINKS"
  mount -o remount,bind,ro "$root$PIP_FIND_LINKS"
fi

git clone -q --no-hardlinks "$proj" "$root/root/project"
echo "fresh-machine: $(git -C "$proj" log -1 --format='%h %s' | cut -c1-90)"
with=${cuda:+, with the CUDA toolkit of this machine}
echo "fresh-machine: root $root$with"
echo "fresh-machine: running: $cmd"
start=$(date +%s)
# In the background, so that a signal to this script is acted on at once (bash runs a trap only after
# the foreground command has ended); cleanup then kills what runs in the root.
set +e
chroot "$root" /usr/bin/env -i "${envs[@]}" bash -c "cd /root/project && $cmd" <&0 &
wait $!
rc=$?
set -e
echo "fresh-machine: exit $rc after $(( $(date +%s) - start )) s"
exit "$rc"
