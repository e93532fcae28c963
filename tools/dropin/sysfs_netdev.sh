#!/usr/bin/env bash
# Runs PROGRAM ARGS where /sys/class/infiniband/DEV/device/net/IFACE exists (a directory),
# as a real rxe's sysfs shows its net device: rdma-core's pyverbs tests (tests/base.py,
# _get_ip_mac) find the address of an RDMA device's interface there, and skip every
# rdma_cm test without it. Root only: in a private mount namespace, /sys/class becomes a
# tmpfs holding each of the machine's classes again (bind mounts) plus that one entry;
# the host's /sys is untouched. Run it inside the network namespace it is for (after
# `ip netns exec`, which mounts that namespace's sysfs).
#
# Usage: tools/dropin/sysfs_netdev.sh DEV IFACE PROGRAM [ARGS...]
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 DEV IFACE PROGRAM [ARGS...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "sysfs_netdev.sh: needs root (a mount namespace)" >&2; exit 77; }
if [ "${ROCE_EMU_SYSFS_NS:-}" != "$$" ]; then
  export ROCE_EMU_SYSFS_NS=$$
  exec unshare --mount --propagation private "$0" "$@"
fi
unset ROCE_EMU_SYSFS_NS
dev=$1 iface=$2
shift 2
t=$(mktemp -d /tmp/roce-emu-sysfs.XXXXXX)
mount -t tmpfs roce-emu-sysfs "$t"
mkdir "$t/old"
mount --rbind /sys/class "$t/old"
mount -t tmpfs -o mode=0755 roce-emu-class /sys/class
for e in "$t"/old/*; do
  n=${e##*/}
  mkdir "/sys/class/$n" && mount --rbind "$e" "/sys/class/$n"
done
mkdir -p "/sys/class/infiniband/$dev/device/net/$iface"
umount -l "$t"
rmdir "$t" 2>/dev/null || true
exec "$@"
