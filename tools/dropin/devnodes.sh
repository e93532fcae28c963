#!/usr/bin/env bash
# Runs PROGRAM in a private mount namespace whose /dev has the RDMA device files a kernel
# with ib_uverbs would have (/dev/infiniband/uverbs0 ... uverbs31), for programs that check
# them before they use a device. Root or not: a plain user gets a user namespace too
# (Debian 12 allows unprivileged ones), and PROGRAM runs with the caller's own uid and gid.
#
# Usage: tools/dropin/devnodes.sh PROGRAM [ARGS...]
#
# Why: UCX (libuct_ib, uct_ib_device_is_accessible) lists a verbs device only if
# "/dev/infiniband/" + ibv_device.dev_name is a character device the process may read and
# write; it never opens it. roce-emu's devices need no kernel, so a machine without RDMA has
# no such file, and no library can fake one (the path is built by UCX and stat()ed directly).
#
# How: a tmpfs goes over /dev in the namespace, every entry of the real /dev is bound back
# into it (directories recursively: /dev/shm, /dev/pts, /dev/mqueue, /dev/hugepages are the
# host's own, so UCX's shared memory transports and a second process see the same /dev/shm),
# and each uverbsN is /dev/null bound onto an empty file: a character device anyone may read
# and write, never opened by UCX. No mknod and no overlay, which a user namespace may not
# have. The host's /dev is untouched; everything goes with the namespace's last process.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 PROGRAM [ARGS...]" >&2; exit 2; }
if [ "${ROCE_EMU_DEVNODES_NS:-}" != "$$" ]; then
  # exec keeps the PID: the inner run knows it is inside the namespace by it.
  export ROCE_EMU_DEVNODES_NS=$$ ROCE_EMU_DEVNODES_IDS="$(id -u):$(id -g)"
  if [ "$(id -u)" = 0 ]; then
    exec unshare --mount --propagation private "$0" "$@"
  fi
  exec unshare --user --map-root-user --mount --propagation private "$0" "$@" ||
    { echo "devnodes.sh: no user namespace here (needs root, or unprivileged user namespaces)" >&2; exit 77; }
fi
ids=$ROCE_EMU_DEVNODES_IDS
unset ROCE_EMU_DEVNODES_NS ROCE_EMU_DEVNODES_IDS
t=$(mktemp -d /tmp/roce-emu-devnodes.XXXXXX)
mount -t tmpfs roce-emu-devnodes "$t"
mkdir "$t/old"
mount --rbind /dev "$t/old"
mount -t tmpfs -o mode=0755 roce-emu-dev /dev
for e in "$t"/old/* "$t"/old/.[!.]*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  n=${e##*/}
  if [ -L "$e" ]; then
    cp -P "$e" "/dev/$n"
  elif [ -d "$e" ]; then
    mkdir "/dev/$n" && mount --rbind "$e" "/dev/$n"
  else
    : > "/dev/$n" && mount --bind "$e" "/dev/$n"
  fi
done
mkdir -p /dev/infiniband
for i in $(seq 0 31); do
  : > "/dev/infiniband/uverbs$i"
  mount --bind "$t/old/null" "/dev/infiniband/uverbs$i"
done
# The new /dev holds what it needs; the scaffolding leaves the tree (and /tmp).
umount -l "$t"
rmdir "$t" 2>/dev/null || true
if [ "${ids%%:*}" = 0 ]; then
  exec "$@"
fi
# Back to the caller's own uid and gid (the namespace's root was for the mounts only).
exec unshare --user --map-user="${ids%%:*}" --map-group="${ids##*:}" "$@"
