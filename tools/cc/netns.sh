# Sourced first by the tools/cc scripts (`. "$here/netns.sh"`): runs the script again in a
# network namespace of its own (root, or `unshare -rn`) with lo up, so its daemons and
# loopback addresses never meet the machine's.
if [ -z "${ROCE_CC_NETNS:-}" ]; then
    ROCE_CC_NETNS=1 exec unshare -n sh "$0" "$@"
fi
ip link set lo up
