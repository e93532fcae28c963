#!/usr/bin/env bash
# Proves README command 1 on a truly fresh Debian 12: a debootstrapped bookworm (minbase plus
# what a fresh machine of this project's kind has that the command needs: gcc, git,
# ca-certificates, apt, python3; not libnl, tshark or anything an earlier run installed),
# the committed state of this repository cloned into it, and the command run inside,
# its output printed. Why: a machine that ran the tests once has tshark, and with it libnl
# and more, so "it works here" proves nothing about a newcomer's first command.
#
# Usage: sudo tools/fresh/chroot.sh [--rebuild] [REV]
#   REV: the commit or branch to clone (default: the checkout's current branch).
#   --rebuild: debootstrap the base again (it is kept in the cache between runs).
# Cache: ${ROCE_FRESH_ROOT:-~/.cache/roce-emu-fresh}: base/ (the debootstrapped image, never
# run in) and run/ (a copy of it per run, removed at the next run).
# The Rust toolchain (/root/.cargo, /root/.rustup) is bind-mounted, as are /proc, /dev and
# /sys; the chroot shares the host's network namespace (the demo's 127.0.0.2 is on lo: Linux
# routes all of 127/8 there). Everything mounted is unmounted on exit, whatever happens.
# Exit status: the command's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "chroot.sh: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
rebuild=0
if [ "${1:-}" = --rebuild ]; then rebuild=1; shift; fi
rev=${1:-$(git -C "$repo" rev-parse --abbrev-ref HEAD)}
cache=${ROCE_FRESH_ROOT:-$HOME/.cache/roce-emu-fresh}
base=$cache/base
run=$cache/run
mirror=${ROCE_FRESH_MIRROR:-http://deb.debian.org/debian}
# What the command needs beyond minbase, all on a fresh machine of this kind (the env's
# installed-rust list): a C compiler and linker for the drop-in, git for the clone,
# certificates for crates.io, python3 for the tests' helpers. libnl, tshark: deliberately not.
include=gcc,libc6-dev,git,ca-certificates,python3
command_1='cargo run --release -- demo && tools/dropin/demo.sh'

command -v debootstrap >/dev/null || { echo "chroot.sh: apt-get install debootstrap" >&2; exit 2; }
[ -d /root/.cargo ] && [ -d /root/.rustup ] || { echo "chroot.sh: no /root/.cargo, /root/.rustup" >&2; exit 2; }

mounts=()
cleanup() {
  local m
  # Innermost first; lazily, so a process still holding a file cannot keep a mount behind.
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    m=${mounts[i]}
    umount -R "$m" 2>/dev/null || umount -R -l "$m" 2>/dev/null || echo "chroot.sh: could not unmount $m" >&2
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bind() { # SRC DST [ro]
  mkdir -p "$2"
  mount --rbind "$1" "$2"
  mount --make-rslave "$2"
  mounts+=("$2")
}

if [ $rebuild = 1 ] || [ ! -f "$base/.done" ]; then
  echo "chroot.sh: debootstrap bookworm (minbase + $include) into $base (a few minutes, once)" >&2
  rm -rf "$base"
  mkdir -p "$cache"
  timeout 1800 debootstrap --variant=minbase --include="$include" bookworm "$base" "$mirror" \
    >"$cache/debootstrap.log" 2>&1 || { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
  touch "$base/.done"
fi

echo "chroot.sh: a fresh copy of the base in $run" >&2
# Never remove through a mount left behind (the bind-mounted toolchain would go with it).
if grep -q " $run/" /proc/mounts; then
  echo "chroot.sh: something is still mounted under $run (see /proc/mounts): unmount it first" >&2
  exit 1
fi
rm -rf --one-file-system "$run"
cp -a "$base" "$run"
# The host's apt sources (the same archive), its resolver.
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  rm -f "$run/etc/apt/sources.list"
  cp /etc/apt/sources.list.d/debian.sources "$run/etc/apt/sources.list.d/"
fi
cp -L /etc/resolv.conf "$run/etc/resolv.conf"

echo "chroot.sh: cloning $repo ($rev) into the chroot's /root/roce-emu" >&2
git clone -q --no-local "$repo" "$run/root/roce-emu"
git -C "$run/root/roce-emu" checkout -q "$rev"
git -C "$run/root/roce-emu" log --oneline -1 >&2

bind /proc "$run/proc"
bind /sys "$run/sys"
bind /dev "$run/dev"
bind /root/.cargo "$run/root/.cargo"
bind /root/.rustup "$run/root/.rustup"

# Nothing of the host's libraries: prove it before the command runs.
for lib in libnl-3.so.200 libnl-route-3.so.200; do
  if chroot "$run" /sbin/ldconfig -p | grep -q "$lib"; then
    echo "chroot.sh: $lib is installed in the chroot: not a fresh machine" >&2; exit 1
  fi
done
for tool in tshark qemu-system-x86_64 bindgen; do
  if chroot "$run" /usr/bin/env PATH=/usr/sbin:/usr/bin:/sbin:/bin sh -c "command -v $tool" >/dev/null; then
    echo "chroot.sh: $tool is installed in the chroot: not a fresh machine" >&2; exit 1
  fi
done

echo "chroot.sh: in the chroot, README command 1: $command_1" >&2
rc=0
start=$SECONDS
timeout 3600 chroot "$run" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  RUSTUP_AUTO_INSTALL=0 \
  /bin/bash -c "cd /root/roce-emu && $command_1" || rc=$?
echo "chroot.sh: README command 1 exited $rc after $((SECONDS - start)) s"
exit $rc
