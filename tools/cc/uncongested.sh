#!/bin/sh
# What congestion control costs a run with no congestion (issue 25): `roce-emu perf write`
# and `roce-emu pingpong` between two NICs on loopback, each in a network namespace of its
# own, with the notification and reaction points on (the defaults: requests ECT(0) and
# paced at line_rate, 100 Gbit/s) and off (`--cc np_enable=0,rp_enable=0`), alternated,
# ROUNDS times each (default 5). Prints each round and the medians, and on/off ratios.
#
#   tools/cc/uncongested.sh [ROUNDS]      (ROCE_EMU: the binary; default target/release)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/netns.sh"
rounds=${1:-5}
bin=${ROCE_EMU:-$root/target/release/roce-emu}
[ -x "$bin" ] || { echo "uncongested.sh: no $bin (cargo build --release, or set ROCE_EMU)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One perf write (5000 x 64 KiB) and one pingpong (1000 x 4 KiB) with knobs $1; prints
# "MB/s usec/iter".
one() {
    "$bin" perf write --bind 127.0.0.1 -p 18551 --json --cc "$1" >"$out/s.json" 2>"$out/s.log" &
    s=$!
    "$bin" perf write 127.0.0.1 --bind 127.0.0.2 -p 18551 --json --cc "$1" --wait 10 \
        >"$out/c.json" 2>"$out/c.log"
    wait $s
    bw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bw_average_mb_per_sec"])' "$out/c.json")
    "$bin" pingpong --bind 127.0.0.1 -p 18552 --cc "$1" >"$out/ps.txt" 2>&1 &
    s=$!
    "$bin" pingpong 127.0.0.1 --bind 127.0.0.2 -p 18552 --cc "$1" --wait 10 >"$out/pc.txt" 2>&1
    wait $s
    lat=$(sed -n 's/.* = \([0-9.]*\) usec\/iter.*/\1/p' "$out/pc.txt")
    echo "$bw $lat"
}

on="np_enable=1,rp_enable=1"
off="np_enable=0,rp_enable=0"
: >"$out/on" && : >"$out/off"
r=1
while [ $r -le "$rounds" ]; do
    a=$(one "$on")
    b=$(one "$off")
    echo "round $r: on  $a   off $b   (perf write MB/s, pingpong usec/iter)"
    echo "$a" >>"$out/on"
    echo "$b" >>"$out/off"
    r=$((r + 1))
done
python3 - "$out/on" "$out/off" <<'EOF'
import statistics, sys
on = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
off = [tuple(map(float, l.split())) for l in open(sys.argv[2])]
bw_on, bw_off = statistics.median(x[0] for x in on), statistics.median(x[0] for x in off)
lat_on, lat_off = statistics.median(x[1] for x in on), statistics.median(x[1] for x in off)
print(f"median perf write: on {bw_on:.1f} MB/s, off {bw_off:.1f} MB/s, on/off {bw_on / bw_off:.3f}")
print(f"median pingpong:   on {lat_on:.2f} usec/iter, off {lat_off:.2f} usec/iter, on/off {lat_on / lat_off:.3f}")
EOF
