#!/usr/bin/env bash
# Builds the interop lab from Debian 12 packages: host tools (apt), the stock kernel with
# rdma_rxe (downloaded and unpacked, never installed), and a busybox initramfs whose /init
# loads rxe on eth0 and runs the lab agent (guest/agent.sh). Nothing lands in the repository:
# everything is cached under $ROCE_LAB_BUILD (default ~/.cache/roce-emu-lab). A second run
# with nothing changed only checks the stamp.
# Usage: tools/lab/build.sh [--force]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
[ "$(id -u)" = 0 ] || die "build.sh needs root (apt-get, chroot)"
t0=$(date +%s.%N)

# ---- host tools ---------------------------------------------------------------------------
need=()
for pair in qemu-system-x86_64:qemu-system-x86 nft:nftables tcpdump:tcpdump cpio:cpio \
            depmod:kmod ip:iproute2 gcc:gcc; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
updated=0
apt_update() { [ $updated = 1 ] || { apt-get update -qq; updated=1; }; }
if [ ${#need[@]} -gt 0 ]; then
  apt_update
  echo "[lab build] apt-get install ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---- packages -----------------------------------------------------------------------------
# Guest user space. Each ELF's libraries are checked against this root (below), so nothing
# from the host is ever copied in.
GUEST="busybox-static libc6 libgcc-s1 libibverbs1 ibverbs-providers ibverbs-utils librdmacm1
rdmacm-utils perftest libibumad3 libpci3 libudev1 zlib1g libnl-3-200 libnl-route-3-200 iproute2 libbpf1
libbsd0 libmd0 libcap2 libdb5.3 libelf1 libmnl0 libselinux1 libpcre2-8-0 libtirpc3
libgssapi-krb5-2 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1 libxtables12
tcpdump libpcap0.8 libdbus-1-3 libsystemd0 libgcrypt20 libgpg-error0 liblz4-1 liblzma5
libzstd1 libssl3"
mkdir -p "$LAB_BUILD/debs"
cd "$LAB_BUILD/debs"
have() { compgen -G "${1}_*.deb" >/dev/null; }
kpkg=$(ls linux-image-*-amd64_*.deb 2>/dev/null | grep -v dbg | head -n1 | cut -d_ -f1 || true)
if [ -z "$kpkg" ]; then
  apt_update
  kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
[ -n "$kpkg" ] || die "cannot resolve linux-image-amd64's kernel package"
todo=()
for p in $kpkg $GUEST; do have "$p" || todo+=("$p"); done
if [ ${#todo[@]} -gt 0 ]; then
  apt_update
  echo "[lab build] downloading ${#todo[@]} packages"
  apt-get download "${todo[@]}" 2>&1 | grep -v -e unsandboxed -e '^Get:' || true
  for p in "${todo[@]}"; do have "$p" || die "apt-get download $p failed"; done
fi

# ---- kernel and modules -------------------------------------------------------------------
cd "$LAB_BUILD"
kdeb=$(ls debs/${kpkg}_*.deb | head -n1)
kver=${kpkg#linux-image-}
if [ "$(cat kernel/.stamp 2>/dev/null)" != "$kdeb" ]; then
  rm -rf kernel && mkdir kernel
  dpkg-deb -x "$kdeb" kernel
  depmod -b kernel "$kver"          # the .deb's postinst would have made modules.dep
  echo "$kdeb" > kernel/.stamp
fi
ln -sf "kernel/boot/vmlinuz-$kver" vmlinuz
mods=kernel/lib/modules/$kver

stamp=$( { echo "$kdeb"; ls debs; cat "$here"/build.sh "$here"/guest/*; } | sha256sum | cut -c1-16)
if [ "${1:-}" != --force ] && [ -f initramfs.cpio ] && [ "$(cat initramfs.stamp 2>/dev/null)" = "$stamp" ]; then
  printf "[lab build] up to date (%.1f s): %s\n" "$(python3 -c "import time;print(time.time()-$t0)")" "$LAB_BUILD/initramfs.cpio"
  exit 0
fi

# Module load order: a depth-first walk of modules.dep (deps listed last-loaded-first).
declare -A path deps seen
while IFS= read -r l; do
  m=${l%%:*}; n=${m##*/}; n=${n%.ko}; n=${n//-/_}
  path[$n]=$m; deps[$m]=${l#*:}
done < "$mods/modules.dep"
order=()
walk() {
  local m=$1 d i
  [ -n "${seen[$m]:-}" ] && return 0
  read -r -a d <<< "${deps[$m]}"
  for ((i=${#d[@]}-1; i>=0; i--)); do walk "${d[$i]}"; done
  seen[$m]=1; order+=("$m")
}
# crc32_generic: rxe's ICRC needs the "crc32" shash; sch_netem: loss/reordering in the guest.
for n in virtio_pci virtio_net 9pnet_virtio 9p crc32_generic ib_core ib_uverbs udp_tunnel \
         ip6_udp_tunnel rdma_rxe ib_umad rdma_ucm sch_netem; do
  [ -n "${path[$n]:-}" ] || die "module $n missing from $kpkg"
  walk "${path[$n]}"
done

# ---- guest root and initramfs -------------------------------------------------------------
r=$LAB_BUILD/rootfs
rm -rf "$r" && mkdir -p "$r"
for p in $GUEST; do dpkg-deb -x "$(ls debs/${p}_*.deb | head -n1)" "$r"; done
rm -rf "$r"/usr/share/{doc,man,info,locale,lintian,bug,zsh,bash-completion} "$r"/usr/lib/x86_64-linux-gnu/gconv
mkdir -p "$r"/{proc,sys,dev,tmp,run,root,lab,etc}
# busybox applets only where no real tool exists (iproute2's ip and tc must win).
for a in $("$r/bin/busybox" --list-full); do
  b=${a##*/}
  for d in bin sbin usr/bin usr/sbin; do [ -e "$r/$d/$b" ] && continue 2; done
  mkdir -p "$r/$(dirname "$a")"; ln -s /bin/busybox "$r/$a"
done
install -m 0755 "$here/guest/init" "$r/init"
install -m 0755 "$here/guest/agent.sh" "$r/etc/agent.sh"
printf 'root:x:0:0:root:/root:/bin/sh\ntcpdump:x:100:101::/:/bin/false\n' > "$r/etc/passwd"
printf 'root:x:0:\ntcpdump:x:101:\n' > "$r/etc/group"
printf '127.0.0.1 localhost\n' > "$r/etc/hosts"
: > "$r/etc/modules.order"
for m in "${order[@]}"; do
  install -D -m 0644 "$mods/$m" "$r/lib/modules/$kver/$m"
  echo "$m" >> "$r/etc/modules.order"
done
cp "$mods"/modules.{order,builtin,builtin.modinfo} "$r/lib/modules/$kver/"
depmod -b "$r" "$kver"
bad=0
while IFS= read -r f; do
  head -c4 "$f" | grep -q ELF || continue
  grep -q ld-linux-x86-64 "$f" || continue
  if chroot "$r" /lib64/ld-linux-x86-64.so.2 --list "/${f#"$r"/}" 2>&1 | grep 'not found'; then
    echo "  ^ missing for ${f#"$r"/}"; bad=1
  fi
done < <(find "$r"/bin "$r"/sbin "$r"/usr/bin "$r"/usr/sbin "$r"/usr/lib/x86_64-linux-gnu/libibverbs -type f)
[ $bad = 0 ] || die "the guest root lacks shared libraries"
# Uncompressed: under TCG, unpacking gzip costs more boot time than reading 40 MB.
(cd "$r" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) > initramfs.cpio.tmp
mv initramfs.cpio.tmp initramfs.cpio
echo "$stamp" > initramfs.stamp
{
  for d in "$kdeb" $(for p in $GUEST; do ls debs/${p}_*.deb | head -n1; done); do
    dpkg-deb -f "$d" Package Version | sed 's/^[A-Za-z]*: //' | paste -sd' '
  done
  dpkg-query -W -f '${Package} ${Version}\n' qemu-system-x86 nftables tcpdump 2>/dev/null || true
} > versions.txt
printf '[lab build] built in %.1f s: %s (%s)\n' "$(python3 -c "import time;print(time.time()-$t0)")" \
  "$LAB_BUILD/initramfs.cpio" "$(du -h initramfs.cpio | cut -f1)"
