#!/usr/bin/env bash
# Runs PROGRAM in a private mount namespace whose /dev has the RDMA character devices a
# kernel with ib_uverbs would have (/dev/infiniband/uverbs0 ... uverbs31, major 231, minor
# 192 + N, mode 0666), for programs that check them before they use a device.
#
# Usage: tools/dropin/devnodes.sh PROGRAM [ARGS...]      (root: unshare, mount, mknod)
#
# Why: UCX (libuct_ib, uct_ib_device_is_accessible) lists a verbs device only if
# "/dev/infiniband/" + ibv_device.dev_name is a character device the process may read and
# write; it never opens it. roce-emu's devices need no kernel, so a machine without RDMA has
# no such file, and no library can fake one (the path is built by UCX and stat()ed directly).
# The nodes are made in an overlay on /dev seen only by PROGRAM and its children: the host's
# /dev is untouched, /dev/shm, /dev/pts, /dev/mqueue and /dev/hugepages are the host's own
# (UCX's shared memory transports and a second process must see the same /dev/shm), and
# everything goes away with the namespace's last process. The nodes are never opened (the
# drop-in has no kernel driver behind them): opening one fails with ENXIO.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 PROGRAM [ARGS...]" >&2; exit 2; }
if [ "${ROCE_EMU_DEVNODES_NS:-}" != "$$" ]; then
  [ "$(id -u)" = 0 ] || { echo "devnodes.sh: needs root (unshare --mount, mknod)" >&2; exit 77; }
  # exec keeps the PID: the inner run knows it is inside the namespace by it.
  export ROCE_EMU_DEVNODES_NS=$$
  exec unshare --mount --propagation private "$0" "$@"
fi
unset ROCE_EMU_DEVNODES_NS
t=$(mktemp -d /tmp/roce-emu-devnodes.XXXXXX)
mount -t tmpfs roce-emu-devnodes "$t"
mkdir "$t/up" "$t/work" "$t/old"
mount --rbind /dev "$t/old"
mount -t overlay roce-emu-devnodes -o "lowerdir=$t/old,upperdir=$t/up,workdir=$t/work" /dev
for m in shm pts mqueue hugepages; do
  if mountpoint -q "$t/old/$m"; then mount --rbind "$t/old/$m" "/dev/$m"; fi
done
mkdir -p /dev/infiniband
for i in $(seq 0 31); do
  [ -e "/dev/infiniband/uverbs$i" ] || mknod -m 0666 "/dev/infiniband/uverbs$i" c 231 $((192 + i))
done
# The overlay holds what it needs; the scaffolding leaves the tree (and /tmp).
umount -l "$t"
rmdir "$t"
exec "$@"
