#!/usr/bin/env bash
# The tools through `roce-emu daemon` against the same tools in-process, in the same run
# (issue 15, item 6): `roce-emu perf write` (bandwidth, target >= 0.8 of in-process) and
# `roce-emu pingpong` (round trip, target <= 1.3x in-process), ROUNDS alternating rounds,
# every round printed, then the medians and their ratios.
#
#   daemon:     one UDP daemon on 127.0.66.1; server and client both attached to it
#               (--daemon SOCKET, --bind 127.0.66.1): the daemon hands packets between
#               its own processes.
#   in-process: server on 127.0.66.2, client on 127.0.66.3, each its own UDP port.
#
# Usage: tools/bench-daemon.sh [ROUNDS] [WRITE_SIZE] [WRITE_ITERS] [PING_SIZE] [PING_ITERS]
#   defaults: 5 rounds, perf write -s 65536 -n 5000, pingpong -s 64 -n 5000.
# Addresses 127.0.66.x and TCP ports 18960-18961 are this script's (no test uses them).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}; wsize=${2:-65536}; witers=${3:-5000}; psize=${4:-64}; piters=${5:-5000}
cargo build --release --quiet --bin roce-emu
bin=target/release/roce-emu
dip=127.0.66.1; sip=127.0.66.2; cip=127.0.66.3
pport=18960; wport=18961
out=$(mktemp -d)
sock=$out/daemon.sock
daemon=
cleanup() {
  if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
  rm -rf "$out"
}
trap cleanup EXIT

timeout 3600 "$bin" daemon --port "udp:$dip" --socket "$sock" >"$out/daemon.log" 2>&1 &
daemon=$!
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { echo "the daemon did not start:"; cat "$out/daemon.log"; exit 1; }

# The BW average column of perf's result row; pingpong's usec/iter.
bw() { awk '$1 ~ /^[0-9]+$/ && NF >= 4 && $2 ~ /^[0-9]+$/ {print $4; exit}'; }
us() { awk '/usec\/iter/ {print $(NF-1); exit}'; }

# one TOOL daemon|inproc: runs a server (waited for by PID) and a client; prints the figure.
one() {
  local tool=$1 mode=$2 port s c srv cli args o
  if [ "$tool" = perf ]; then
    port=$wport; args=(perf write -s "$wsize" -n "$witers")
  else
    port=$pport; args=(pingpong -s "$psize" -n "$piters")
  fi
  if [ "$mode" = daemon ]; then
    s=(--bind "$dip" --daemon "$sock"); c=(--bind "$dip" --daemon "$sock"); srv=$dip
  else
    s=(--bind "$sip"); c=(--bind "$cip"); srv=$sip
  fi
  timeout 120 "$bin" "${args[@]}" -p "$port" --wait 30 "${s[@]}" >"$out/server" 2>&1 &
  local pid=$!
  o=$(timeout 120 "$bin" "${args[@]}" -p "$port" --wait 10 "${c[@]}" "$srv" 2>&1) || {
    echo "$tool $mode failed:" >&2; echo "$o" >&2; cat "$out/server" >&2; }
  wait "$pid" || true
  if [ "$tool" = perf ]; then echo "$o" | bw; else echo "$o" | us; fi
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
wi=(); wd=(); pi=(); pd=()
for i in $(seq 1 "$rounds"); do
  # Alternate which goes first, so neither always runs on a machine the other just warmed.
  if [ $((i % 2)) = 1 ]; then
    wi+=("$(one perf inproc)"); wd+=("$(one perf daemon)")
    pi+=("$(one pingpong inproc)"); pd+=("$(one pingpong daemon)")
  else
    wd+=("$(one perf daemon)"); wi+=("$(one perf inproc)")
    pd+=("$(one pingpong daemon)"); pi+=("$(one pingpong inproc)")
  fi
  for v in "${wi[-1]}" "${wd[-1]}" "${pi[-1]}" "${pd[-1]}"; do
    [ -n "$v" ] || { echo "round $i: a run gave no figure (its output is above)"; exit 1; }
  done
  echo "round $i: perf write $wsize B: in-process ${wi[-1]} MB/s, daemon ${wd[-1]} MB/s" \
    "($(ratio "${wd[-1]}" "${wi[-1]}")); pingpong $psize B: in-process ${pi[-1]} us," \
    "daemon ${pd[-1]} us ($(ratio "${pd[-1]}" "${pi[-1]}")x)"
done
mwi=$(printf '%s\n' "${wi[@]}" | median); mwd=$(printf '%s\n' "${wd[@]}" | median)
mpi=$(printf '%s\n' "${pi[@]}" | median); mpd=$(printf '%s\n' "${pd[@]}" | median)
echo "median of $rounds: perf write $wsize B ($witers iterations): in-process $mwi MB/s," \
  "daemon $mwd MB/s, daemon/in-process $(ratio "$mwd" "$mwi") (target >= 0.8)"
echo "median of $rounds: pingpong $psize B ($piters iterations): in-process $mpi us," \
  "daemon $mpd us, daemon/in-process $(ratio "$mpd" "$mpi")x (target <= 1.3)"
echo "($(nproc) cores, $(uname -r), load average $load0 before, $(cut -d' ' -f1-3 /proc/loadavg) after; daemon counters: $("$bin" counters --json --daemon "$sock" 2>/dev/null |
  python3 -c 'import json,sys; c=json.load(sys.stdin)["counters"]; print(", ".join(f"{k} {c[k]}" for k in ("hairpin_pkts","ring_full","no_owner")))' 2>/dev/null || echo unavailable))"
