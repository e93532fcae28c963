#!/usr/bin/env bash
# Builds the drop-in libibverbs.so.1 and librdmacm.so.1: the roce-emu-ibverbs and
# roce-emu-rdmacm static libraries (abi/, rdmacm/), each linked into a shared object with
# rdma-core's symbol versions (abi/libibverbs.map, rdmacm/librdmacm.map) and SONAME;
# librdmacm.so.1 NEEDs libibverbs.so.1 (ours, beside it), as Debian's does.
# rustc cannot do this itself: a cdylib gets rustc's own version script, which replaces
# ours and leaves every symbol unversioned (../shared/design/verbs/notes.md §6).
#
# Usage: tools/dropin/build.sh [--debug]      (default: release)
# Output: target/<profile>/dropin/{libibverbs,librdmacm}.so.1 and their .so links, next to the
# roce-emu binary, where `roce-emu run` and `roce-emu env` find them.
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=release
flag=--release
if [ "${1:-}" = --debug ]; then profile=debug; flag=; fi
cargo build $flag --quiet -p roce-emu-ibverbs -p roce-emu-rdmacm
out=target/$profile/dropin
mkdir -p "$out"
cc -shared -o "$out/libibverbs.so.1.tmp.$$" \
  -Wl,--whole-archive "target/$profile/libroce_emu_ibverbs.a" -Wl,--no-whole-archive \
  -Wl,--version-script=abi/libibverbs.map -Wl,-soname,libibverbs.so.1 \
  -Wl,-z,now -Wl,--gc-sections \
  -lpthread -ldl -lm -lgcc_s -lc
mv "$out/libibverbs.so.1.tmp.$$" "$out/libibverbs.so.1"
ln -sf libibverbs.so.1 "$out/libibverbs.so"
# Each Rust static library carries its own copy of std and roce-emu; the version script
# keeps every symbol but librdmacm's local, so the two copies never meet.
cc -shared -o "$out/librdmacm.so.1.tmp.$$" \
  -Wl,--whole-archive "target/$profile/libroce_emu_rdmacm.a" -Wl,--no-whole-archive \
  -Wl,--version-script=rdmacm/librdmacm.map -Wl,-soname,librdmacm.so.1 \
  -Wl,-z,now -Wl,--gc-sections \
  -L"$out" -l:libibverbs.so.1 -Wl,-rpath,'$ORIGIN' \
  -lpthread -ldl -lm -lgcc_s -lc
mv "$out/librdmacm.so.1.tmp.$$" "$out/librdmacm.so.1"
ln -sf librdmacm.so.1 "$out/librdmacm.so"
echo "$out/libibverbs.so.1"
echo "$out/librdmacm.so.1"
