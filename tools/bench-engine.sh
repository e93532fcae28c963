#!/usr/bin/env bash
# Runs the engine criterion bench (a 4 KiB-MTU RDMA WRITE stream through two engines in
# memory) and prints packets/s, bytes/s and the ratio to memcpy of the same bytes.
# Usage: tools/bench-engine.sh [criterion args...]
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
cargo bench --bench engine -- "$@" 2>&1 | tee "$log" >&2
dir=target/criterion/engine_write_4096
mean() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['mean']['point_estimate'])" "$dir/$1/new/estimates.json"; }
pkts=$(grep -Eo '= [0-9]+ packets' "$log" | head -1 | grep -Eo '[0-9]+')
base=$(mean memcpy_baseline); t=$(mean two_engines_write_stream)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
python3 - "$base" "$t" "$pkts" <<'PY'
import sys
base, t, pkts = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
nbytes = 16 * 65536
print(f"memcpy of {nbytes} bytes:   {base/1e3:9.1f} us  {nbytes/base:6.2f} GB/s")
print(f"engine WRITE stream:    {t/1e3:9.1f} us  {nbytes/t:6.2f} GB/s  {pkts/t*1e3:6.2f} Mpkt/s ({pkts} packets incl. ACKs per iteration)")
print("each byte: gathered, ICRC generated, ICRC checked, scattered: two copies and two CRC passes")
print(f"ratio engine/memcpy (throughput): {base/t:.3f}")
PY
rm -f "$log"
