#!/usr/bin/env bash
# Fetches Debian 12's real RDMA user space (the unmodified programs the drop-in
# libibverbs.so.1 is tested with, and the libibverbs-dev headers its ABI is checked
# against) with `apt-get download`, and unpacks it into a cache: nothing is installed, nothing
# lands in the repository. Prints the root of the unpacked tree.
#
# Usage: tools/dropin/debian.sh        (cache: $ROCE_DEBIAN_ROOT, default ~/.cache/roce-emu-debian12)
#
# In the tree: usr/bin/{ibv_*,ib_*_bw,ib_*_lat,rping,...}, usr/lib/x86_64-linux-gnu/{libmlx5,
# libefa,librdmacm,libibumad,libpci}.so.*, usr/include/infiniband/*.h, the pyverbs modules
# under usr/lib/python3/dist-packages/pyverbs and rdma-core's test suite, gunzipped, under
# tests/ (Debian ships it in /usr/share/doc/rdma-core/tests with most files compressed).
# UCX 1.13 (libucx0, ucx-utils: ucx_info, ucx_perftest; its transports are modules that
# libucs finds beside itself, usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0 ...) and qperf too;
# what they need beyond that (libnuma1, libgomp1, libstdc++6) a fresh Debian 12 has.
# The stock libibverbs.so.1 is unpacked too, as usr/lib/.../libibverbs.so.1.stock, so it
# can never shadow the drop-in on a library path.
#
# Beside the tree, $root/libpath holds the tree's library path (LD_LIBRARY_PATH form):
# every folder of the tree that holds a shared library by its SONAME (lib*.so.N), so
# usr/lib/x86_64-linux-gnu and lib/x86_64-linux-gnu (where Debian 12's libnl-3-200 puts
# libnl-3.so.200), and any other a package uses. It is the one source of that path for
# demo.sh, the tests and the lab: a program run with less loads what the tree lacks from
# the system, and a fresh machine does not have it.
set -euo pipefail
root=${ROCE_DEBIAN_ROOT:-$HOME/.cache/roce-emu-debian12}
PKGS="libibverbs1 libibverbs-dev ibverbs-utils ibverbs-providers perftest librdmacm1
rdmacm-utils libibumad3 libpci3 python3-pyverbs rdma-core libnl-3-200 libnl-route-3-200
libucx0 ucx-utils qperf librdmacm-dev libfabric1 libfabric-bin libpsm2-2 libpsm-infinipath1
libatomic1 libuuid1"
stamp="$root/.stamp"
# The cache key: this script's layout version and the exact .deb files (name_version_arch)
# the tree was unpacked from, so a package added here, or a .deb replaced in debs/, unpacks
# the tree again, and nothing else does.
debs_key() { (cd "$root/debs" 2>/dev/null && ls -1 -- *.deb 2>/dev/null | sort | paste -sd' '); }
have_all() {
  local p
  for p in $PKGS; do compgen -G "$root/debs/${p}_*.deb" >/dev/null || return 1; done
}
# Written on every run (not only after a fetch), so a tree unpacked by an older debian.sh
# gets it too; atomically, as other runs may read it meanwhile.
write_libpath() {
  find "$root/tree" -path "$root/tree/tests" -prune -o -path "$root/tree/usr/share" -prune \
    -o -name 'lib*.so.[0-9]*' ! -name '*.stock' -printf '%h\n' | sort -u | paste -sd: \
    >"$root/libpath.$$"
  mv "$root/libpath.$$" "$root/libpath"
}
if have_all && [ "$(cat "$stamp" 2>/dev/null)" = "v5 $(debs_key)" ]; then
  write_libpath; echo "$root"; exit 0
fi
mkdir -p "$root/debs"
cd "$root/debs"
todo=()
for p in $PKGS; do compgen -G "${p}_*.deb" >/dev/null || todo+=("$p"); done
if [ ${#todo[@]} -gt 0 ]; then
  echo "debian.sh: fetching Debian 12's RDMA programs (${todo[*]}) into $root (once)" >&2
  # apt-get download needs package lists; update them once if the first try fails.
  if ! apt-get download "${todo[@]}" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then apt-get update -qq; fi
    apt-get download "${todo[@]}" 2>&1 | grep -v -e unsandboxed -e '^Get:' >&2 || true
  fi
  for p in "${todo[@]}"; do
    compgen -G "${p}_*.deb" >/dev/null || { echo "apt-get download $p failed" >&2; exit 1; }
  done
fi
rm -rf "$root/tree.new" && mkdir "$root/tree.new"
for d in *.deb; do dpkg-deb -x "$d" "$root/tree.new"; done
# What ldconfig (or a package's update-alternatives) makes on a real install: a link by
# SONAME beside each library that has none (libpsm-infinipath1 ships only
# usr/lib/libpsm1/libpsm_infinipath.so.1.16, its alternative names it .so.1).
find "$root/tree.new" -path "$root/tree.new/usr/share" -prune -o -type f -name 'lib*.so.*' -print |
  while read -r f; do
    soname=$(objdump -p "$f" 2>/dev/null | awk '/SONAME/ {print $2}')
    if [ -n "$soname" ] && [ ! -e "$(dirname "$f")/$soname" ]; then
      ln -s "$(basename "$f")" "$(dirname "$f")/$soname"
    fi
  done
lib="$root/tree.new/usr/lib/x86_64-linux-gnu"
for f in "$lib"/libibverbs.so*; do
  [ -L "$f" ] && rm -f "$f" && continue
  case "$f" in *.stock) ;; *) mv "$f" "$lib/libibverbs.so.1.stock" ;; esac
done
# rdma-core's tests, as run_tests.py expects them (plain .py files).
t="$root/tree.new/usr/share/doc/rdma-core/tests"
if [ -d "$t" ]; then
  mkdir -p "$root/tree.new/tests"
  cp -r "$t"/. "$root/tree.new/tests/"
  find "$root/tree.new/tests" -name '*.gz' -exec gunzip -f {} +
fi
rm -rf "$root/tree" && mv "$root/tree.new" "$root/tree"
echo "v5 $(debs_key)" >"$stamp"
write_libpath
echo "$root"
