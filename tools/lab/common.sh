# shellcheck shell=bash
# Settings shared by the lab scripts (sourced). Override any of them from the environment.
LAB_BUILD=${ROCE_LAB_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-emu-lab}
# The lab's own network namespace: a bridge, one tap per guest, nothing else. 198.18.0.0/15
# (RFC 2544 benchmarking) and 2001:db8::/32 (documentation) are routed nowhere.
LAB_NS=${ROCE_LAB_NS:-roceemu-lab}
LAB_BR=rlbr0
LAB_HOST4=198.18.0.1
LAB_HOST6=2001:db8:4791::1
LAB_BR_MAC=02:00:00:4c:ee:01
guest_ip4() { echo "198.18.0.$((10 + $1))"; }
guest_ip6() { echo "2001:db8:4791::$((10 + $1))"; }
guest_mac() { printf '52:54:00:4c:ee:%02x\n' "$1"; }
die() { echo "lab: $*" >&2; exit 1; }
