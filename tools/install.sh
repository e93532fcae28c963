#!/usr/bin/env bash
# Installs roce-emu: the binary, the drop-in libibverbs.so.1 and librdmacm.so.1, man pages and shell completions.
#
# Usage: tools/install.sh [--debug] [PREFIX]      (PREFIX default /usr/local; --debug: the
#                                                 debug builds, for the tests)
#   PREFIX/bin/roce-emu
#   PREFIX/lib/roce-emu/libibverbs.so.1, librdmacm.so.1 (+ .so links): where `roce-emu run` and
#       `roce-emu env` look for it (../lib/roce-emu beside the binary), never on the
#       system's library path, so no other program loads it unless run through roce-emu
#   PREFIX/share/man/man1/roce-emu.1, roce-emu-SUBCOMMAND.1 (clap_mangen)
#   PREFIX/share/bash-completion/completions/roce-emu, share/zsh/vendor-completions/_roce-emu,
#   share/fish/vendor_completions.d/roce-emu.fish (clap_complete)
# The man pages and completions come from the binary itself (`roce-emu gen-docs`), so they
# describe exactly its options. Uninstall: remove those files (the script prints them).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
prefix=${1:-/usr/local}
case "$prefix" in /*) ;; *) prefix=$PWD/$prefix ;; esac

echo "install.sh: building the drop-in libibverbs.so.1 and librdmacm.so.1 ($profile)" >&2
if [ $profile = debug ]; then tools/dropin/build.sh --debug >/dev/null; else tools/dropin/build.sh >/dev/null; fi
echo "install.sh: building the roce-emu binary ($profile)" >&2
if [ $profile = debug ]; then cargo build --quiet --bin roce-emu; else cargo build --release --quiet --bin roce-emu; fi

out=target/$profile
man=$prefix/share/man/man1
bash_c=$prefix/share/bash-completion/completions
zsh_c=$prefix/share/zsh/vendor-completions
fish_c=$prefix/share/fish/vendor_completions.d
echo "install.sh: installing into $prefix" >&2
install -d "$prefix/bin" "$prefix/lib/roce-emu" "$man" "$bash_c" "$zsh_c" "$fish_c"
install -m 755 "$out/roce-emu" "$prefix/bin/roce-emu"
install -m 755 "$out/dropin/libibverbs.so.1" "$prefix/lib/roce-emu/libibverbs.so.1"
ln -sf libibverbs.so.1 "$prefix/lib/roce-emu/libibverbs.so"
install -m 755 "$out/dropin/librdmacm.so.1" "$prefix/lib/roce-emu/librdmacm.so.1"
ln -sf librdmacm.so.1 "$prefix/lib/roce-emu/librdmacm.so"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$prefix/bin/roce-emu" gen-docs --man "$tmp/man" --completions "$tmp/completions"
install -m 644 "$tmp"/man/*.1 "$man/"
install -m 644 "$tmp/completions/roce-emu.bash" "$bash_c/roce-emu"
install -m 644 "$tmp/completions/_roce-emu" "$zsh_c/_roce-emu"
install -m 644 "$tmp/completions/roce-emu.fish" "$fish_c/roce-emu.fish"

{
  echo "$prefix/bin/roce-emu"
  echo "$prefix/lib/roce-emu/libibverbs.so.1"
  echo "$prefix/lib/roce-emu/libibverbs.so"
  echo "$prefix/lib/roce-emu/librdmacm.so.1"
  echo "$prefix/lib/roce-emu/librdmacm.so"
  for f in "$tmp"/man/*.1; do echo "$man/$(basename "$f")"; done
  echo "$bash_c/roce-emu"
  echo "$zsh_c/_roce-emu"
  echo "$fish_c/roce-emu.fish"
}
