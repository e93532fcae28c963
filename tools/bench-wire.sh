#!/usr/bin/env bash
# Runs the wire criterion bench and prints each case as a ratio of throughput to
# crc32fast alone over the same frame bytes, measured in the same run.
# Usage: tools/bench-wire.sh [criterion args...]   (e.g. --measurement-time 3)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench wire -- "$@" >&2
dir=target/criterion/wire_4096
mean() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['mean']['point_estimate'])" "$dir/$1/new/estimates.json"; }
base=$(mean crc32fast_baseline)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
printf '%-32s %10s %8s\n' case "ns/frame" "ratio"
for c in crc32fast_baseline parse_and_check_icrc build_and_generate_icrc build_copy_and_generate_icrc; do
  t=$(mean "$c")
  python3 -c "import sys; b,t=float(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]:<32} {t:10.1f} {b/t:8.3f}')" "$c" "$base" "$t"
done
echo "ratio = crc32fast time / case time (throughput ratio; target >= 0.8)"
