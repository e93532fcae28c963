#!/usr/bin/env bash
# Builds the conformance agent (tools/conform/agent/*.c) with gcc against Debian 12's
# libibverbs-dev headers and libibverbs.so.1, fetched by tools/dropin/debian.sh into its
# cache (nothing installed). The result, target/conform/agent, is linked dynamically against
# libibverbs.so.1 only, with symbols no newer than Debian 12's glibc and rdma-core 44: it runs
# in the lab's Debian 12 guest on rxe, and on this machine on roce-emu's drop-in
# (`roce-emu run -- target/conform/agent`).
#
# Usage: tools/conform/build-agent.sh        prints the path of the agent
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=$("$repo/tools/dropin/debian.sh")
root=$cache/tree
lib=$root/usr/lib/x86_64-linux-gnu
# The stock library's own dependencies (libnl-3 under lib/, libnl-route-3 under usr/lib)
# are found at link time through every library folder of the tree, as debian.sh lists them.
rpath_link=$(sed 's/:/ /g' "$cache/libpath" | xargs -n1 printf -- '-Wl,-rpath-link,%s ')
out=$repo/target/conform
mkdir -p "$out"
[ -f "$lib/libibverbs.so.1.stock" ] || { echo "no libibverbs.so.1.stock in $lib" >&2; exit 1; }
# debian.sh keeps the stock library under another name (so that it never shadows the
# drop-in on a library path): link it through a folder of our own where it is libibverbs.so.
ldir=$out/lib
mkdir -p "$ldir"
ln -sf "$lib/libibverbs.so.1.stock" "$ldir/libibverbs.so"
# Debian's librdmacm (the CM scripts' commands, agent/cm.c).
rdmacm=$(ls "$lib"/librdmacm.so.1.*.* | head -1)
ln -sf "$rdmacm" "$ldir/librdmacm.so"
gcc -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wshadow -Wformat=2 \
  -isystem "$root/usr/include" \
  -o "$out/agent.tmp" "$here"/agent/{main,proto,verbs,qp,srq,cm}.c \
  -L"$ldir" $rpath_link -Wl,--as-needed -libverbs -lrdmacm
# Only libibverbs.so.1 and libc; no glibc symbol newer than Debian 12's 2.36.
needed=$(objdump -p "$out/agent.tmp" | awk '/NEEDED/ {print $2}' | sort | paste -sd' ')
[ "$needed" = "libc.so.6 libibverbs.so.1 librdmacm.so.1" ] || { echo "agent needs: $needed" >&2; exit 1; }
if objdump -T "$out/agent.tmp" | grep -E 'GLIBC_2\.(3[7-9]|[4-9][0-9])' >&2; then
  echo "agent needs a glibc newer than Debian 12's" >&2; exit 1
fi
mv "$out/agent.tmp" "$out/agent"
echo "$out/agent"
