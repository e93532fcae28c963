#!/usr/bin/env bash
# End-to-end figures on loopback, each against a raw-UDP baseline measured in the same run:
#   (a) raw UDP goodput: sendmmsg/recvmmsg of 4112-byte datagrams (a 4096-MTU RoCE packet:
#       BTH 12 + payload 4096 + ICRC 4), counted as 4096 payload bytes each;
#   (b) roce-emu perf write -s 65536 -m 4096 (BW average);
#   (c) raw UDP 64-byte ping-pong round trip (busy polling, one datagram each way);
#   (d) roce-emu pingpong -s 64 round trip (usec/iter);
#   (e) for context, raw UDP round trip with RC's packet count: each side sends its message
#       and a 28-byte "ACK" in one sendmmsg and receives both (an RC ping-pong moves four
#       datagrams per round trip, raw UDP two);
#   (f) the same as one UDP GSO send each way, received with GRO: how roce-emu's UDP
#       backend sends a message with the ACK behind it. The floor for (d) on this kernel;
#   (g) raw UDP goodput as (a) but in UDP GSO trains received with GRO, as roce-emu's
#       backend sends a message's MTU-sized packets. The ceiling for (b) on this kernel.
# Prints b/a (target >= 0.8), d/c (target <= 1.5), and d/e, d/f, b/g for context: ratios of
# the medians of RUNS rounds, and b/a and d/c round by round.
# Usage: tools/bench-net.sh [RUNS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cargo build --release --quiet --bin roce-emu --example udp_baseline
bin=target/release/roce-emu
udp=target/release/examples/udp_baseline
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Every process runs under timeout; the first of a pair is waited for by PID.
a_run() {
  timeout 60 "$udp" sink 127.0.0.70:47910 >"$out/sink" &
  local p=$!
  sleep 0.2
  timeout 60 "$udp" blast 127.0.0.70:47910 4112 200000
  wait "$p"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["datagrams"]*4096/d["secs"]/1048576)' "$out/sink"
}
g_run() {
  timeout 60 "$udp" sink 127.0.0.70:47915 gro >"$out/sinkg" &
  local p=$!
  sleep 0.2
  timeout 60 "$udp" blast 127.0.0.70:47915 4112 200000 gso
  wait "$p"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["datagrams"]*4096/d["secs"]/1048576)' "$out/sinkg"
}
b_run() {
  timeout 120 "$bin" perf write -s 65536 -m 4096 -n 5000 -p 18800 --bind 127.0.0.71 --wait 30 --json >"$out/srv" &
  local p=$!
  timeout 120 "$bin" perf write -s 65536 -m 4096 -n 5000 -p 18800 --bind 127.0.0.72 --wait 10 --json 127.0.0.71 >"$out/cli"
  wait "$p"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bw_average_mb_per_sec"])' "$out/cli"
}
c_run() {
  timeout 60 "$udp" echo 127.0.0.73:47911 20000 &
  local p=$!
  sleep 0.2
  timeout 60 "$udp" ping 127.0.0.73:47911 64 20000 >"$out/ping"
  wait "$p"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usec_per_iter"])' "$out/ping"
}
e_run() {
  timeout 60 "$udp" echo 127.0.0.73:47912 20000 2 &
  local p=$!
  sleep 0.2
  timeout 60 "$udp" ping 127.0.0.73:47912 64 20000 2 >"$out/ping2"
  wait "$p"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usec_per_iter"])' "$out/ping2"
}
f_run() {
  timeout 60 "$udp" echo 127.0.0.73:47913 20000 gso &
  local p=$!
  sleep 0.2
  timeout 60 "$udp" ping 127.0.0.73:47913 64 20000 gso >"$out/ping3"
  wait "$p"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usec_per_iter"])' "$out/ping3"
}
d_run() {
  timeout 120 "$bin" pingpong -s 64 -n 20000 -p 18801 --bind 127.0.0.74 --wait 30 >"$out/pps" &
  local p=$!
  timeout 120 "$bin" pingpong -s 64 -n 20000 -p 18801 --bind 127.0.0.75 --wait 10 127.0.0.74 >"$out/ppc"
  wait "$p"
  sed -n 's/.* = \([0-9.]*\) usec\/iter/\1/p' "$out/ppc"
}

# Rounds of a..g rather than runs of each in turn: a ratio's two sides are measured
# minutes apart at most, so a change in the machine's load moves both.
declare -A v
for _ in $(seq "$runs"); do
  for k in a b c d e f g; do v[$k]+="$(${k}_run) "; done
done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -r)"
python3 - "${v[a]}" "${v[b]}" "${v[c]}" "${v[d]}" "${v[e]}" "${v[f]}" "${v[g]}" <<'PY'
import statistics, sys
a, b, c, d, e, f, g = ([float(x) for x in s.split()] for s in sys.argv[1:8])
m = {k: statistics.median(x) for k, x in zip("abcdefg", (a, b, c, d, e, f, g))}
def runs(x): return ", ".join(f"{v:.1f}" for v in x)
print(f"(a) raw UDP goodput, 4112-byte datagrams  {m['a']:9.1f} MB/s   runs: {runs(a)}")
print(f"(b) roce-emu perf write 64 KiB, MTU 4096  {m['b']:9.1f} MB/s   runs: {runs(b)}")
print(f"(c) raw UDP 64-byte round trip            {m['c']:9.2f} us     runs: {runs(c)}")
print(f"(d) roce-emu pingpong -s 64 round trip    {m['d']:9.2f} us     runs: {runs(d)}")
print(f"(e) raw UDP, 2 datagrams each way          {m['e']:9.2f} us     runs: {runs(e)}")
print(f"(f) raw UDP, 2 each way as one GSO send     {m['f']:9.2f} us     runs: {runs(f)}")
print(f"(g) raw UDP goodput, GSO trains + GRO      {m['g']:9.1f} MB/s   runs: {runs(g)}")
ba, dc = m['b'] / m['a'], m['d'] / m['c']
def rounds(x, y): return ", ".join(f"{p / q:.2f}" for p, q in zip(x, y))
print(f"b/a = {ba:.2f} (target >= 0.8: {'met' if ba >= 0.8 else 'MISSED'})   per round: {rounds(b, a)}")
print(f"d/c = {dc:.2f} (target <= 1.5: {'met' if dc <= 1.5 else 'MISSED'})   per round: {rounds(d, c)}")
print(f"d/e = {m['d'] / m['e']:.2f} (against raw UDP moving RC's four datagrams per round trip)")
print(f"d/f = {m['d'] / m['f']:.2f} (against the same four as two GSO sends, roce-emu's own pattern)")
print(f"b/g = {m['b'] / m['g']:.2f} (against raw UDP sending in GSO trains too)")
PY
