#!/usr/bin/env bash
# Unmodified Debian 12 RDMA programs on roce-emu, on this machine, with no kernel module
# and no configuration: ibv_devinfo, then ibv_rc_pingpong, ib_write_bw / ib_read_bw and rping as
# server and client processes on the loopback device (rxe_lo, 127.0.0.1), each started with
# `roce-emu run`. The programs come from Debian's packages, fetched into a cache by
# tools/dropin/debian.sh (nothing is installed); the drop-in is built by build.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
# What each slow step does, said before it starts (the first run compiles for minutes).
echo "demo.sh: building the drop-in libibverbs.so.1 (tools/dropin/build.sh, release)" >&2
tools/dropin/build.sh >/dev/null
echo "demo.sh: building the roce-emu binary (cargo build --release)" >&2
cargo build --release --quiet --bin roce-emu
echo "demo.sh: Debian 12's RDMA programs (tools/dropin/debian.sh, cached after the first run)" >&2
cache=$(tools/dropin/debian.sh)
root=$cache/tree
bin=$root/usr/bin
# perftest also links Debian's libmlx5, libefa, librdmacm (and through it libnl-3),
# libibumad and libpci: every library folder of the tree, as debian.sh lists them.
export LD_LIBRARY_PATH=$(cat "$cache/libpath")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
run=(target/release/roce-emu run --)

echo "== roce-emu run -- ibv_devinfo -d rxe_lo"
"${run[@]}" "$bin/ibv_devinfo" -d rxe_lo

pair() { # NAME PORT SERVER-ARGS... -- CLIENT-ARGS...
  local name=$1 port=$2; shift 2
  local sargs=() cargs=()
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done; shift
  cargs=("$@")
  echo; echo "== $name (server and client: two processes, one address)"
  "${run[@]}" "$bin/$name" "${sargs[@]}" > /tmp/roce-emu-demo-server.$$ 2>&1 &
  local spid=$!
  for _ in $(seq 1 100); do
    grep -q ":$(printf '%04X' "$port") .* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null && break
    sleep 0.05
  done
  local rc=0
  timeout 60 "${run[@]}" "$bin/$name" "${cargs[@]}" || rc=$?
  wait "$spid" || rc=$?
  echo "-- server:"; cat /tmp/roce-emu-demo-server.$$; rm -f /tmp/roce-emu-demo-server.$$
  [ $rc = 0 ] || { echo "FAIL: $name (status $rc)"; exit 1; }
}
pair ibv_rc_pingpong 18515 -d rxe_lo -g 1 -s 4096 -n 1000 -- -d rxe_lo -g 1 -s 4096 -n 1000 127.0.0.1
pair ib_write_bw 18516 -d rxe_lo -p 18516 -s 65536 -n 5000 -- -d rxe_lo -p 18516 -s 65536 -n 5000 127.0.0.1
pair ib_read_bw 18517 -d rxe_lo -p 18517 -s 65536 -n 5000 -- -d rxe_lo -p 18517 -s 65536 -n 5000 127.0.0.1

# rdma_cm: the drop-in librdmacm.so.1; the first rdma_cm call starts the per-user daemon of
# 127.0.0.1 (its connection manager owns QP1), which exits a while after the last program.
echo; echo "== rping (rdma_cm: server and client, two processes, one address)"
log=/tmp/roce-emu-demo-rping.$$
"${run[@]}" "$bin/rping" -s -a 127.0.0.1 -C 5 -V -v > "$log.server" 2>&1 &
spid=$!
# rping's client does not retry a connect its server is not listening for yet (REJ, invalid
# service ID): a bounded number of tries.
rc=1
for _ in $(seq 1 20); do
  sleep 0.5
  if timeout 60 "${run[@]}" "$bin/rping" -c -a 127.0.0.1 -C 5 -V -v > "$log.client" 2>&1; then rc=0; break; fi
done
cat "$log.client"
wait "$spid" || rc=$?
echo "-- server:"; cat "$log.server"; rm -f "$log.server" "$log.client"
[ $rc = 0 ] || { echo "FAIL: rping (status $rc)"; exit 1; }
echo; echo "PASS: unmodified ibv_devinfo, ibv_rc_pingpong, ib_write_bw, ib_read_bw and rping on roce-emu"
