#!/usr/bin/env bash
# Fuzz smoke run: regenerates the seed corpora (tools/fuzz-seed.sh), builds every
# cargo-fuzz target once, then runs each for SECONDS (default 20) with -max_total_time.
# Fails if any target crashes, times out or runs out of memory; the input that did it is
# left in fuzz/artifacts/<target>/ (reproduce with: <cargo fuzz> run <target> <file>).
#
# Toolchain: `cargo +nightly fuzz` when a nightly toolchain is installed, otherwise the
# stable toolchain with RUSTC_BOOTSTRAP=1 (cargo-fuzz passes -Z flags, e.g.
# -Zsanitizer=address, that stable rustc accepts only under that variable).
# FUZZ_STABLE=1 forces the stable path even where nightly exists (to check what a
# stable-only CI machine does).
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`) and python3.
#
# Usage: tools/fuzz-smoke.sh [SECONDS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

secs=${1:-20}
case "$secs" in
  '' | *[!0-9]*) echo "usage: $0 [SECONDS]  (a whole number; got '$secs')" >&2; exit 2 ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz-smoke: cargo-fuzz is not installed (cargo install cargo-fuzz --locked)" >&2
  exit 1
fi
if [ "${FUZZ_STABLE:-0}" != 1 ] && command -v rustup >/dev/null && rustup toolchain list 2>/dev/null | grep -q '^nightly' \
  && cargo +nightly --version >/dev/null 2>&1; then
  fuzz=(cargo +nightly fuzz)
  desc="cargo +nightly fuzz"
else
  export RUSTC_BOOTSTRAP=1
  # Cargo caches rustc's answers in target/.rustc_info.json without keying them on
  # RUSTC_BOOTSTRAP: one earlier `cargo fuzz` without it leaves a cached "-Z is only
  # accepted on nightly" failure that every later run would reuse. Don't use the cache.
  export CARGO_CACHE_RUSTC_INFO=0
  fuzz=(cargo fuzz)
  desc="RUSTC_BOOTSTRAP=1 cargo fuzz ($(rustc --version))"
fi
echo "fuzz-smoke: using $desc, ${secs}s per target"

tools/fuzz-seed.sh
"${fuzz[@]}" build

mapfile -t targets < <("${fuzz[@]}" list)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz-smoke: no fuzz targets found" >&2
  exit 1
fi

logs=fuzz/target/smoke-logs
mkdir -p "$logs"
failed=()
summary=()
for t in "${targets[@]}"; do
  log="$logs/$t.log"
  echo "fuzz-smoke: $t (${secs}s, log $log)"
  if "${fuzz[@]}" run "$t" -- -max_total_time="$secs" -print_final_stats=1 >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
    # The gist: the panic or sanitizer message, libFuzzer's verdict and where the input
    # went; the whole report (backtrace included) is in the log.
    echo "---- $t: ${log} (excerpt)" >&2
    grep -E -A3 'panicked at|ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)' "$log" \
      | grep -Ev '^ +#[0-9]+ ' | head -30 >&2 || true
    grep -E '^SUMMARY|Test unit written|Reproduce with|cargo fuzz (run|tmin)' "$log" >&2 \
      || tail -30 "$log" >&2
  fi
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  cov=$(grep -Eo '(DONE|INITED) +cov: [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$' || true)
  summary+=("$(printf '%-12s %-7s %10s execs  cov %s' "$t" "$status" "${runs:-?}" "${cov:-?}")")
done

echo "fuzz-smoke summary ($desc, ${secs}s per target):"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz-smoke: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz-smoke: all ${#targets[@]} targets ran ${secs}s without a crash"
