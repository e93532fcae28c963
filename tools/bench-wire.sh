#!/usr/bin/env bash
# Runs the wire criterion bench ROUNDS times and prints each case as a ratio of throughput
# to crc32fast alone over the same frame bytes: per round (the cases of one round are
# measured seconds apart, so a change in the machine's load moves them together) and the
# median over rounds. Times are criterion's median estimates (interference only ever slows
# a sample down, and the median ignores the slowed minority).
# Usage: tools/bench-wire.sh [ROUNDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
dir=target/criterion/wire_4096
cases="crc32fast_baseline parse_and_check_icrc build_and_generate_icrc build_copy_and_generate_icrc"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  cargo bench --bench wire -- --warm-up-time 1 --measurement-time 2 --noplot >&2
  for c in $cases; do
    printf '%s %s %s\n' "$r" "$c" \
      "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['median']['point_estimate'])" "$dir/$c/new/estimates.json")"
  done >>"$out"
done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -r)"
python3 - "$out" $cases <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
cases = sys.argv[2:]
t = {}
for r, c, v in rows:
    t.setdefault(c, {})[r] = float(v)
base = t[cases[0]]
print(f"{'case':<30} {'ns/frame':>9} {'ratio':>6}   per round")
for c in cases:
    ratios = [base[r] / t[c][r] for r in sorted(base, key=int)]
    ns = statistics.median(t[c].values())
    print(f"{c:<30} {ns:9.1f} {statistics.median(ratios):6.3f}   " + " ".join(f"{x:.2f}" for x in ratios))
print("ratio = crc32fast time / case time (throughput ratio; target >= 0.8), median over rounds")
PY
