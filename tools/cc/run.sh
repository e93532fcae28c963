#!/bin/sh
# Congestion experiments (issue 25): N RC flows (`roce-emu perf write`) through one
# congestion point. Clients attach to daemon A, whose port has the egress queue
# (`--queue`, 1 Gbit/s by default); servers attach to daemon B. Everything runs on
# loopback addresses inside a network namespace of its own (root, or `unshare -rn`).
#
#   tools/cc/run.sh [-n FLOWS] [--cc on|off] [--incast] [--iters N] [--size BYTES]
#                   [--queue SETTINGS] [--out DIR]
#
#   -n FLOWS     flows, each its own client and server process (default 2)
#   --cc on|mlx5|off  DCQCN (notification and reaction points): `on` with its time
#                constants scaled to user-space round trips (below), `mlx5` with mlx5's
#                defaults (tuned for microsecond round trips), `off` (default)
#   --knobs K    more congestion-control knobs for --cc on (`key=value,...`, mlx5's
#                names: see `roce-emu perf --help`), e.g. the timers scaled for
#                user-space round trips
#   --incast     FLOWS short flows started at once (default 8 of 200 x 64 KB) into a
#                small buffer (default 512KB)
#   --iters N    messages per flow (default 4000, incast 200), --size BYTES (65536)
#   --stagger S  seconds between the long flows' starts (default 0.5; an incast's start
#                together). A flow shorter than that never overlaps the next one
#   --queue S    the queue's settings (default rate=1gbit buffer=1MB kmin=40KB
#                kmax=200KB pmax=0.2 seed=1; incast buffer=512KB)
#   --every SECS the record's interval (default 0.1)
#   --out DIR    where the record, the counters, the report and the plot go
#                (default /tmp/roce-cc-FLOWS-cc-MODE)
#
# Prints per-flow goodput, Jain's fairness index, the queue's depth, drops, marks and
# CNPs (tools/cc/report.py), and writes DIR/plot.svg (`roce-emu plot`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/netns.sh"

flows=2 cc=off incast=0 iters= size=65536 queue= out= every=0.1 extra= stagger=0.5
while [ $# -gt 0 ]; do
    case $1 in
    -n) flows=$2; shift 2 ;;
    --cc) cc=$2; shift 2 ;;
    --incast) incast=1; shift ;;
    --iters) iters=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --queue) queue=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --stagger) stagger=$2; shift 2 ;;
    --knobs) extra=$2; shift 2 ;;
    *) echo "run.sh: unknown option $1 (see the head of $0)" >&2; exit 2 ;;
    esac
done
case $cc in
# mlx5's defaults assume a round trip of microseconds: alpha gains 5/1024 per 1 us
# period with a CNP and loses at least 1/1024 per period without, so with CNPs a
# millisecond apart (this machine's loopback round trip through two daemons and a queue)
# alpha stays near 0, every cut is tiny and a standing queue far over kmax stays. Scaled
# here: alpha's period 1 ms with gain 1/16 (dce_tcp_g 960, the HPCC simulator's
# Mellanox-DCQCN EwmaGain), at most one cut and one CNP per ~ms, the increase timer
# 1.5 ms (HPCC's RPTimer), and the target clamped at each cut.
on) knobs="np_enable=1,rp_enable=1,line_rate=1gbit,dce_tcp_g=960,dce_tcp_rtt=1000,rate_reduce_monitor_period=1000,min_time_between_cnps=500,rpg_time_reset=1500,clamp_tgt_rate=1${extra:+,$extra}" ;;
mlx5) knobs="np_enable=1,rp_enable=1,line_rate=1gbit${extra:+,$extra}" ;;
off) knobs="np_enable=0,rp_enable=0" ;;
*) echo "run.sh: --cc on, mlx5 or off" >&2; exit 2 ;;
esac
if [ $incast = 1 ]; then
    mode=incast
    : "${iters:=200}"
    : "${queue:=rate=1gbit buffer=512KB kmin=40KB kmax=200KB pmax=0.2 seed=1}"
else
    mode=long
    : "${iters:=4000}"
    : "${queue:=rate=1gbit buffer=1MB kmin=40KB kmax=200KB pmax=0.2 seed=1}"
fi
: "${out:=/tmp/roce-cc-$flows-$cc-$mode}"
bin=${ROCE_EMU:-$root/target/debug/roce-emu}
[ -x "$bin" ] || { echo "run.sh: no $bin (cargo build, or set ROCE_EMU)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"
A=127.0.92.1 B=127.0.92.2
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

"$bin" daemon --port udp:$A --socket "$out/a.sock" --queue "$queue" >"$out/daemon-a.log" 2>&1 &
da=$!
"$bin" daemon --port udp:$B --socket "$out/b.sock" >"$out/daemon-b.log" 2>&1 &
db=$!
pids="$da $db"
for i in $(seq 50); do
    [ -S "$out/a.sock" ] && [ -S "$out/b.sock" ] && break
    sleep 0.1
done
"$bin" counters --daemon "$out/a.sock" --watch "$every" --record "$out/record.jsonl" &
rec=$!
pids="$pids $rec"

i=1
while [ $i -le "$flows" ]; do
    "$bin" perf write --daemon "$out/b.sock" --bind $B -p $((18600 + i)) --json \
        -n "$iters" -s "$size" --cc "$knobs" --wait 30 >"$out/server-$i.json" 2>"$out/server-$i.log" &
    pids="$pids $!"
    i=$((i + 1))
done
sleep 0.5
clients=
i=1
while [ $i -le "$flows" ]; do
    "$bin" perf write $B --daemon "$out/a.sock" --bind $A -p $((18600 + i)) --json \
        -n "$iters" -s "$size" --cc "$knobs" --timeout 30 >"$out/client-$i.json" 2>"$out/client-$i.log" &
    clients="$clients $!"
    # Long flows start a little apart, so the plot shows each one's arrival; an incast's
    # start together.
    [ $incast = 1 ] || sleep "$stagger"
    i=$((i + 1))
done
failed=0
for c in $clients; do
    wait "$c" || failed=$((failed + 1))
done
sleep 0.6 # the processes' last counter reports
"$bin" counters --daemon "$out/a.sock" --json >"$out/counters-a.json"
"$bin" counters --daemon "$out/b.sock" --json >"$out/counters-b.json"
kill $rec 2>/dev/null || true
echo "flows=$flows cc=$cc mode=$mode iters=$iters size=$size queue=\"$queue\" failed_clients=$failed" >"$out/setup.txt"
python3 "$here/report.py" "$out" | tee "$out/report.txt"
"$bin" plot "$out/record.jsonl" -o "$out/plot.svg" --title "$flows flows ($mode), DCQCN $cc, queue $queue"
