#!/usr/bin/env bash
# The project's whole test suite (README command 2; CI runs it through .ci/run):
# format check, clippy with warnings as errors, every test, a short fuzz smoke run, and the
# interop tests against the real Linux rxe driver in qemu guests (tools/lab/interop.sh: needs
# root; without it they print SKIPPED, and under CI they fail instead).
# FUZZ_SECONDS (default 20) sets the fuzz time per target; FUZZ_SECONDS=0 skips fuzzing
# (loudly). INTEROP=0 skips the interop tests (loudly; not allowed under CI).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

# The drop-ins' C types must be exactly Debian 12's headers (bindgen; CI installs it).
step "abi/src/ffi.rs and rdmacm/src/ffi.rs against Debian 12's libibverbs-dev and librdmacm-dev (tools/dropin/bindgen.sh --check)"
if command -v bindgen >/dev/null && tools/dropin/bindgen.sh --check; then
  :
elif command -v bindgen >/dev/null; then
  exit 1
elif [ -n "${CI:-}" ]; then
  echo "bindgen is missing: CI must check abi/src/ffi.rs and rdmacm/src/ffi.rs" >&2; exit 1
else
  echo "SKIPPED: abi/src/ffi.rs and rdmacm/src/ffi.rs check (no bindgen: cargo install bindgen-cli; apt-get install libclang-dev)" >&2
fi

step "cargo test (workspace: the NIC, the tools, the drop-in libibverbs.so.1)"
cargo test --workspace --all-targets 2>&1 | tee target/test-output.txt
# Count what ran, so a run that executed nothing is visible.
passed=$(grep -Eo 'test result: ok\. [0-9]+ passed' target/test-output.txt | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test-output.txt | awk '{s+=$1} END {print s+0}')

fuzz_seconds=${FUZZ_SECONDS:-20}
if [ "$fuzz_seconds" = 0 ]; then
  echo "SKIPPED: fuzz smoke run (FUZZ_SECONDS=0)" >&2
else
  step "fuzz smoke: ${fuzz_seconds}s per target"
  tools/fuzz-smoke.sh "$fuzz_seconds"
fi

if [ "${INTEROP:-1}" = 0 ] && [ -z "${CI:-}" ]; then
  echo "SKIPPED: interop tests against real rxe (INTEROP=0)" >&2
else
  step "interop against real rxe in qemu (tools/lab/interop.sh)"
  cargo build --release --quiet --bin roce-emu
  rm -rf target/interop
  set +e
  tools/lab/interop.sh --out target/interop 2>&1 | tee target/interop-output.txt
  interop_rc=${PIPESTATUS[0]}
  set -e
  ip=$(sed -n 's/^interop: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' target/interop-output.txt)
  if_=$(sed -n 's/^interop: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' target/interop-output.txt)
  passed=$((passed + ${ip:-0}))
  failed=$((failed + ${if_:-0}))
  # A run that died before its summary line is a failure too.
  if [ "$interop_rc" != 0 ] && [ "${if_:-0}" = 0 ]; then failed=$((failed + 1)); fi
fi

step "summary"
echo "${passed} passed, ${failed} failed"
[ "$failed" = 0 ]
