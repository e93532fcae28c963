#!/usr/bin/env bash
# Unmodified perftest (Debian 12's ib_write_bw and friends, through the drop-in
# libibverbs.so.1) against `roce-emu perf`, the same test with the same options in the same
# run: ROUNDS alternating rounds, the median of each, and their ratio.
#
# Usage: tools/bench-dropin.sh [write|read|send] [SIZE] [ITERS] [ROUNDS] [same|two]
#   same: server and client on one address (127.0.0.1; both attach to its daemon, started
#   on demand); two (default): 127.0.0.1 and 127.0.0.2, each its own daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
op=${1:-write}; size=${2:-65536}; iters=${3:-20000}; rounds=${4:-5}; mode=${5:-two}
tools/dropin/build.sh >/dev/null
cargo build --release --quiet --bin roce-emu
cache=$(tools/dropin/debian.sh)
root=$cache/tree
lib="$PWD/target/release/dropin:$(cat "$cache/libpath")"
bin=target/release/roce-emu
srv=127.0.0.1; cli=127.0.0.2
[ "$mode" = same ] && cli=127.0.0.1
port=18990

# The BW average column of perftest's (and `roce-emu perf`'s) result row.
bw() { awk '$1 ~ /^[0-9]+$/ && NF >= 4 && $2 ~ /^[0-9]+$/ {print $4; exit}'; }

one() { # one TOOL: prints the client's MB/s
  local out
  if [ "$1" = perftest ]; then
    LD_LIBRARY_PATH=$lib ROCE_EMU_DEVICES=rxe0=$srv timeout 120 "$root/usr/bin/ib_${op}_bw" \
      -d rxe0 -p $port -s "$size" -n "$iters" >/dev/null 2>&1 &
    sleep 0.4
    out=$(LD_LIBRARY_PATH=$lib ROCE_EMU_DEVICES=rxe0=$cli timeout 120 "$root/usr/bin/ib_${op}_bw" \
      -d rxe0 -p $port -s "$size" -n "$iters" $srv 2>&1)
  else
    timeout 120 $bin perf "$op" --bind $srv -p $port -s "$size" -n "$iters" >/dev/null 2>&1 &
    sleep 0.4
    out=$(timeout 120 $bin perf "$op" --bind $cli -p $port -s "$size" -n "$iters" $srv 2>&1)
  fi
  wait
  echo "$out" | bw
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

p=(); r=()
for i in $(seq 1 "$rounds"); do
  p+=("$(one perftest)"); r+=("$(one roce-emu)")
  echo "round $i: ib_${op}_bw ${p[-1]} MB/s, roce-emu perf $op ${r[-1]} MB/s"
done
mp=$(printf '%s\n' "${p[@]}" | median); mr=$(printf '%s\n' "${r[@]}" | median)
echo "median of $rounds: ib_${op}_bw (unmodified, drop-in) $mp MB/s; roce-emu perf $op $mr MB/s;" \
  "ratio $(awk -v a="$mp" -v b="$mr" 'BEGIN {printf "%.2f", a / b}')" \
  "(size $size, $iters iterations, $mode address$( [ "$mode" = same ] || echo es); $(nproc) cores, $(uname -r))"
