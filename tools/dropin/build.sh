#!/usr/bin/env bash
# Builds the drop-in libibverbs.so.1: the roce-emu-ibverbs static library (abi/), linked
# into a shared object with rdma-core's symbol versions (abi/libibverbs.map) and SONAME.
# rustc cannot do this itself: a cdylib gets rustc's own version script, which replaces
# ours and leaves every symbol unversioned (../shared/design/verbs/notes.md §6).
#
# Usage: tools/dropin/build.sh [--debug]      (default: release)
# Output: target/<profile>/dropin/libibverbs.so.1 and the libibverbs.so link, next to the
# roce-emu binary, where `roce-emu run` and `roce-emu env` find them.
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=release
flag=--release
if [ "${1:-}" = --debug ]; then profile=debug; flag=; fi
cargo build $flag --quiet -p roce-emu-ibverbs
out=target/$profile/dropin
mkdir -p "$out"
cc -shared -o "$out/libibverbs.so.1.tmp.$$" \
  -Wl,--whole-archive "target/$profile/libroce_emu_ibverbs.a" -Wl,--no-whole-archive \
  -Wl,--version-script=abi/libibverbs.map -Wl,-soname,libibverbs.so.1 \
  -Wl,-z,now -Wl,--gc-sections \
  -lpthread -ldl -lm -lgcc_s -lc
mv "$out/libibverbs.so.1.tmp.$$" "$out/libibverbs.so.1"
ln -sf libibverbs.so.1 "$out/libibverbs.so"
echo "$out/libibverbs.so.1"
