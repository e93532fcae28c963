#!/usr/bin/env bash
# The project's whole test suite (README command 2; CI runs it through .ci/run):
# format check, clippy with warnings as errors, every test, and a short fuzz smoke run.
# FUZZ_SECONDS (default 20) sets the fuzz time per target; FUZZ_SECONDS=0 skips fuzzing
# (loudly).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

step "cargo test"
cargo test --all-targets 2>&1 | tee target/test-output.txt
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

step "summary"
echo "${passed} passed, ${failed} failed"
