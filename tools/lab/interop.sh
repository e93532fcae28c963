#!/usr/bin/env bash
# Interop tests: roce-emu on the host side of the lab bridge against the real Linux rxe driver
# in qemu guests (tools/lab/lab.sh), with rxe-to-rxe runs of the same tests for comparison.
# The dropin-* tests run Debian 12's unmodified ibv_rc_pingpong, ib_write_bw and ib_read_bw (and
# ibv_ud_pingpong, ibv_uc_pingpong, ibv_srq_pingpong, each also run rxe-to-rxe)
# on the host side through roce-emu's drop-in libibverbs.so.1 (tools/dropin/build.sh builds
# it next to the roce-emu binary, or ROCE_EMU_DROPIN_DIR names its folder;
# tools/dropin/debian.sh fetches the programs into its cache). The daemon-* tests run the
# same programs attached to a `roce-emu daemon` that owns its own L2 port on the lab bridge:
# a TAP, or AF_PACKET on a veth.
# conform-rxe runs the conformance scripts (spec/) against rxe: the agent
# (tools/conform/agent/, built by tools/conform/build-agent.sh) in guest 1, `roce-emu conform`
# on the host side as the scripted peer; its matrix (matrix.txt, matrix.json) stays in OUT.
# Every test keeps its capture (tcpdump on the bridge) and both sides' output in OUT; a failed
# test prints them, the capture decoded by `roce-emu pcap`.
#
# Usage: tools/lab/interop.sh [--bin PATH] [--out DIR] [FILTER]
#   FILTER: run only tests whose name matches this extended regular expression.
# Without root, /dev/net/tun or qemu this prints SKIPPED and exits 0, unless CI is set
# (CI must run it): then it exits 1.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN=$root/target/release/roce-emu
OUT=
FILTER=
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) FILTER=$1; shift ;;
  esac
done

skip() {
  echo "SKIPPED: interop tests against real rxe: $*"
  if [ -n "${CI:-}" ]; then echo "CI is set: the interop tests must run here" >&2; exit 1; fi
  exit 0
}
[ "$(id -u)" = 0 ] || skip "needs root (network namespace, taps)"
[ -c /dev/net/tun ] || skip "needs /dev/net/tun"
bash "$here/build.sh" || { echo "FAIL: lab build"; exit 1; }
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 missing after build.sh"
[ -x "$BIN" ] || (cd "$root" && cargo build --release --quiet --bin roce-emu) || exit 1

# The drop-in tests need the library and Debian's programs. The library next to the default
# binary is rebuilt every run (under a second when nothing changed: cargo's check and the
# link), as a stale one would test old code; ROCE_EMU_DROPIN_DIR names a ready one instead.
# debian.sh fetches the programs once, then only checks its stamp.
DROPIN_TESTS="dropin-rc_pingpong-host-server dropin-rc_pingpong-host-client
dropin-write_bw-host-server dropin-write_bw-host-client dropin-read_bw-host-server
dropin-read_bw-host-client dropin-gid-table"
for t in ud uc srq; do DROPIN_TESTS="$DROPIN_TESTS dropin-${t}_pingpong-host-server dropin-${t}_pingpong-host-client"; done
for k in tap afpacket; do
  for t in rc_pingpong write_bw; do DROPIN_TESTS="$DROPIN_TESTS daemon-$k-$t-host-server daemon-$k-$t-host-client"; done
done
for p in rping ucmatose udaddy; do DROPIN_TESTS="$DROPIN_TESTS dropin-$p-host-server dropin-$p-host-client"; done
want_any() { local n; for n in "$@"; do [ -z "$FILTER" ] || [[ "$n" =~ $FILTER ]] && return 0; done; return 1; }
if want_any $DROPIN_TESTS; then
  DROPIN=${ROCE_EMU_DROPIN_DIR:-$(dirname "$BIN")/dropin}
  if [ "$DROPIN" = "$root/target/release/dropin" ]; then
    "$root/tools/dropin/build.sh" >/dev/null || { echo "FAIL: tools/dropin/build.sh"; exit 1; }
  fi
  [ -f "$DROPIN/libibverbs.so.1" ] || { echo "FAIL: no libibverbs.so.1 in $DROPIN"; exit 1; }
  DEBIAN=$("$root/tools/dropin/debian.sh") || { echo "FAIL: tools/dropin/debian.sh (Debian 12's RDMA packages)"; exit 1; }
  # Every library folder of the tree (libnl-3 is under lib/, the rest under usr/lib/).
  DEBIAN_LIBS=$(cat "$DEBIAN/libpath")
  DEBIAN=$DEBIAN/tree
  [ -x "$DEBIAN/usr/bin/ibv_rc_pingpong" ] || { echo "FAIL: no ibv_rc_pingpong in $DEBIAN"; exit 1; }
fi

# The conformance agent for rxe: a plain libibverbs program built against Debian 12's
# rdma-core (the guest's), copied into the guests' share by its test.
AGENT=
if want_any conform-rxe; then
  AGENT=$("$root/tools/conform/build-agent.sh") || { echo "FAIL: tools/conform/build-agent.sh"; exit 1; }
fi

. "$here/lab.sh"
OUT=${OUT:-$(mktemp -d /tmp/roce-emu-interop.XXXXXX)}
mkdir -p "$OUT"
LAB_RUN=$OUT/lab
mkdir -p "$LAB_RUN"
# An interrupted test's capture and daemon (by PID) go before the namespace they live in.
trap '[ -z "${DUMP:-}" ] || kill -INT "$DUMP" 2>/dev/null; [ -z "${DPID:-}" ] || kill -TERM "$DPID" 2>/dev/null; lab_down' EXIT
trap 'exit 130' INT TERM

S1=$(guest_ip4 1)
# roce-emu sleeps on its socket instead of polling when idle: the two TCG guests need both
# of this machine's cores, and a polling NIC measurably slows the guest it talks to.
SPIN=(--spin-us "${ROCE_EMU_SPIN_US:-0}")
PASS=0; FAIL=0
declare -a SUMMARY=()

want() { [ -z "$FILTER" ] || [[ "$1" =~ $FILTER ]]; }

# run_test NAME FUNCTION ARGS...: the function leaves the test's figure in $FIG and returns
# its verdict; host-side output goes to $T/host.txt, guest-side to $T/guest*.txt.
run_test() {
  local name=$1 t0 rc; shift
  want "$name" || return 0
  # A fresh folder: an --out DIR used before holds the last run's files.
  T=$OUT/$name; rm -rf "$T"; mkdir -p "$T"; FIG=; POST=
  # -B: a 64 MiB capture buffer. roce-emu sends a 64 KiB WRITE as one GSO train of 16
  # 4-KiB frames, and tcpdump, sharing two cores with a TCG guest, fell behind a burst of
  # them with the default 2 MiB ("18 packets dropped by kernel"), losing the NAK after it.
  ip netns exec "$LAB_NS" tcpdump -i "$LAB_BR" -B 65536 --immediate-mode -U \
    -w "$T/capture.pcap" "udp port 4791 or tcp port 18515" 2>"$T/tcpdump.log" &
  local dump=$!
  DUMP=$dump
  for _ in $(seq 1 50); do grep -q listening "$T/tcpdump.log" 2>/dev/null && break; sleep 0.1; done
  # Guest 2 runs only for the rxe-to-rxe tests; otherwise it is stopped, so that every test
  # has the same CPUs: one guest and one host-side NIC, or two guests.
  if [[ "$name" == *rxe-rxe* ]]; then g_resume 2; else g_pause 2; fi
  t0=$(date +%s.%N)
  "$@"; rc=$?
  local secs
  secs=$(python3 -c "import time;print(f'{time.time()-$t0:.1f}')")
  sleep 0.3; kill -INT "$dump" 2>/dev/null; wait "$dump" 2>/dev/null; DUMP=
  # A check on the closed capture, if the test asked for one.
  if [ $rc = 0 ] && [ -n "$POST" ]; then
    local dropped
    dropped=$(sed -n 's/^\([0-9]*\) packets dropped by kernel/\1/p' "$T/tcpdump.log")
    $POST || { rc=1; FIG="$FIG; capture check failed: $POST (capture dropped ${dropped:-?} packets)"; }
  fi
  if [ $rc = 0 ]; then
    PASS=$((PASS + 1)); echo "PASS $name (${secs} s) $FIG"
  else
    FAIL=$((FAIL + 1)); echo "FAIL $name (${secs} s) $FIG"
    for f in "$T"/*.txt; do echo "---- $f"; tail -15 "$f"; done
    echo "---- capture ($T/capture.pcap), last frames:"
    "$BIN" pcap "$T/capture.pcap" 2>&1 | tail -12
  fi
  SUMMARY+=("$(printf '%-34s %-4s %6s s  %s' "$name" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$secs" "$FIG")")
}

usec() { sed -n 's/.* = \([0-9.]*\) usec\/iter/\1/p' "$1" | tail -1; }
# The figure of a roce-emu perf run, and how many of its datagrams left in GSO trains
# (rxe receives them as separate packets with IP IDs 0, 1, 2, ...: each ICRC must match).
mbps_json() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); io=j.get("io",{}); print("%.2f MB/s, %d of %d datagrams sent in GSO trains" % (j["bw_average_mb_per_sec"], io.get("gso_segments",0), io.get("tx_datagrams",0)))' "$1" 2>/dev/null; }
mbps_table() { awk '/#bytes/{getline; print $4 " MB/s"}' "$1" | tail -1; }

# ---- the three shapes of a test ---------------------------------------------------------
# Each leaves the host's output in $T/host.txt and the guests' in $T/guest*.txt, and
# succeeds when every side exited 0; HOST_RC is roce-emu's own exit status.
# emu_client GUEST_CMD ROCE_EMU_ARGS...: guest 1 serves, roce-emu connects to it.
emu_client() {
  local gcmd=$1 k rc grc; shift
  k=$(g_start 1 "$gcmd" 110)
  h timeout 100 "$BIN" "$@" "${SPIN[@]}" --wait 30 --timeout 30 "$S1" > "$T/host.txt" 2>&1; rc=$?
  g_wait 1 "$k" 120; grc=$?; g_out 1 "$k" > "$T/guest.txt"
  HOST_RC=$rc
  [ $rc = 0 ] && [ $grc = 0 ]
}
# emu_server GUEST_CMD ROCE_EMU_ARGS...: roce-emu serves, guest 1 connects.
emu_server() {
  local gcmd=$1 hp k rc grc; shift
  ip netns exec "$LAB_NS" timeout 100 "$BIN" "$@" "${SPIN[@]}" --wait 60 --timeout 30 \
    > "$T/host.txt" 2>&1 &
  hp=$!
  sleep 0.5
  k=$(g_start 1 "$gcmd" 110)
  g_wait 1 "$k" 120; grc=$?; g_out 1 "$k" > "$T/guest.txt"
  wait $hp; rc=$?
  HOST_RC=$rc
  [ $rc = 0 ] && [ $grc = 0 ]
}
# rxe_rxe SERVER_CMD CLIENT_CMD: guest 1 serves, guest 2 connects (the baseline).
rxe_rxe() {
  local k1 k2 rc1 rc2
  k1=$(g_start 1 "$1" 110)
  k2=$(g_start 2 "sleep 2; $2 $S1" 110)
  g_wait 2 "$k2" 120; rc2=$?; g_out 2 "$k2" > "$T/guest2.txt"
  g_wait 1 "$k1" 120; rc1=$?; g_out 1 "$k1" > "$T/guest1.txt"
  [ $rc1 = 0 ] && [ $rc2 = 0 ]
}

# ---- rdma_cm -------------------------------------------------------------------------------
# Debian's rdmacm-utils between two guests: the kernel's CM on both sides (REQ/REP/RTU/DREQ/
# DREP, SIDR for udaddy) is the baseline the drop-in librdmacm and the daemon's CM must meet.
cm_cmd() { # rping|ucmatose|udaddy server|client: the program and its arguments
  case "$1:$2" in
    rping:server) echo "rping -s -a 0.0.0.0 -C 10 -V" ;;
    rping:client) echo "rping -c -C 10 -V -a" ;;
    ucmatose:server) echo "ucmatose -C 10" ;;
    ucmatose:client) echo "ucmatose -C 10 -s" ;;
    udaddy:server) echo "udaddy -C 10" ;;
    udaddy:client) echo "udaddy -C 10 -s" ;;
  esac
}
cm_done() { # PROGRAM FILE: the program's own success line
  case "$1" in
    rping) ! grep -qi "error\|fail" "$2" ;;
    ucmatose|udaddy) grep -q "^test complete" "$2" && grep -q "return status 0" "$2" ;;
  esac
}
# CM MADs on the wire: PROGRAM's exchange decoded (REQ/REP/RTU/DREQ/DREP, SIDR_REQ/SIDR_REP).
cm_seen() {
  "$BIN" pcap "$T/capture.pcap" > "$T/decoded.txt" 2>&1 || true
  CM_MADS=$(grep -c "UD_SEND_ONLY QP=0x000001 .*qkey=0x80010000" "$T/decoded.txt" 2>/dev/null)
}
cm_rxe_rxe() { # PROGRAM
  POST=icrc_ok
  rxe_rxe "$(cm_cmd "$1" server)" "$(cm_cmd "$1" client)"
  local rc=$?
  cm_seen; FIG="$CM_MADS CM MADs"
  [ $rc = 0 ] && cm_done "$1" "$T/guest1.txt" && cm_done "$1" "$T/guest2.txt"
}
# rping to a port nobody listens on: the kernel's CM answers REJ (reason 8, invalid service
# ID) and rping reports the reject.
cm_rej_rxe_rxe() {
  POST=icrc_ok
  local k2 rc2
  k2=$(g_start 2 "rping -c -C 1 -p 9999 -a $S1" 60)
  g_wait 2 "$k2" 70; rc2=$?; g_out 2 "$k2" > "$T/guest2.txt"
  FIG="rping exit $rc2"
  [ $rc2 != 0 ] && grep -qi "reject\|error" "$T/guest2.txt"
}

# The drop-in librdmacm on the host side against the kernel's rdma_cm in guest 1: Debian's
# unmodified rdmacm-utils through ROCE_EMU_DEVICES=rxe0=HOST4 (no daemon named: the first
# rdma_cm call starts the on-demand daemon of udp:HOST4, whose connection manager owns QP1).
cm_dropin() { # PROGRAM host-server|host-client
  local prog=$1 role=$2 k rc grc w=0 flag=$LAB_RUN/g1/listening hp
  POST=icrc_ok
  if [ "$role" = host-server ]; then
    local args
    args=$(cm_cmd "$prog" server); args=${args#"$prog"}
    [ "$prog" = rping ] && args="-s -a $LAB_HOST4 -C 10 -V"
    dropin_cmd "$prog" $args &
    hp=$!
    # Listening once the on-demand daemon holds UDP 4791 (the listen follows the bind).
    until h ss -Hlun 'sport = :4791' 2>/dev/null | grep -q .; do
      sleep 0.1; w=$((w + 1)); [ $w -lt 200 ] && kill -0 $hp 2>/dev/null || break
    done
    sleep 1
    k=$(g_start 1 "$(cm_cmd "$prog" client) $LAB_HOST4" 110)
    g_wait 1 "$k" 120; grc=$?; g_out 1 "$k" > "$T/guest.txt"
    wait $hp; rc=$?
  else
    rm -f "$flag"
    # The guest's listener is up once the kernel lists a LISTEN cm_id (iproute2's rdma).
    k=$(g_start 1 "$(cm_cmd "$prog" server) & p=\$!; i=0; while [ \$i -lt 300 ] && ! rdma res show cm_id 2>/dev/null | grep -q LISTEN; do sleep 0.1; i=\$((i + 1)); done; : > /lab/g1/listening; wait \$p" 110)
    until [ -f "$flag" ]; do sleep 0.1; w=$((w + 1)); [ $w -lt 400 ] || break; done
    local args
    args=$(cm_cmd "$prog" client); args=${args#"$prog"}
    dropin_cmd "$prog" $args "$S1"; rc=$?
    g_wait 1 "$k" 120; grc=$?; g_out 1 "$k" > "$T/guest.txt"
  fi
  HOST_RC=$rc
  cm_seen; FIG="$CM_MADS CM MADs"
  [ $rc = 0 ] && [ $grc = 0 ] && cm_done "$prog" "$T/host.txt" && cm_done "$prog" "$T/guest.txt"
}

# ---- pingpong -----------------------------------------------------------------------------
rcpp() { echo "ibv_rc_pingpong -d rxe0 -g $1 -s $2 -m $3 -n $4 ${5:-}"; }
pp_emu_client() { # SIZE MTU ITERS [-c]
  emu_client "$(rcpp "$G4_1" "$@")" pingpong --bind "$LAB_HOST4" -s "$1" -m "$2" -n "$3" ${4:-}
  local rc=$?; FIG="$(usec "$T/host.txt") us/iter"
  [ $rc = 0 ] && grep -q "$3 iters in" "$T/guest.txt"
}
pp_emu_server() {
  emu_server "$(rcpp "$G4_1" "$@") $LAB_HOST4" pingpong --bind "$LAB_HOST4" -s "$1" -m "$2" -n "$3" ${4:-}
  local rc=$?; FIG="$(usec "$T/guest.txt") us/iter"
  [ $rc = 0 ] && grep -q "$3 iters in" "$T/host.txt"
}
pp_rxe_rxe() {
  rxe_rxe "$(rcpp "$G4_1" "$@")" "$(rcpp "$G4_2" "$@")"
  local rc=$?; FIG="$(usec "$T/guest2.txt") us/iter"; return $rc
}
# IPv6 GIDs (the TCP exchange stays on IPv4, as ibv_rc_pingpong's server listens there).
pp6_emu_client() { # SIZE ITERS
  g_run 1 "ping -c 2 -W 2 $LAB_HOST6" > "$T/ping6.txt" 2>&1
  emu_client "ibv_rc_pingpong -d rxe0 -g $G6_1 -s $1 -n $2" pingpong --bind "$LAB_HOST6" -s "$1" -n "$2"
  local rc=$?; FIG="$(usec "$T/host.txt") us/iter"
  [ $rc = 0 ] && grep -q "GID 2001:db8:4791::1" "$T/guest.txt"
}
pp6_emu_server() {
  g_run 1 "ping -c 2 -W 2 $LAB_HOST6" > "$T/ping6.txt" 2>&1
  emu_server "ibv_rc_pingpong -d rxe0 -g $G6_1 -s $1 -n $2 $LAB_HOST4" pingpong --bind "$LAB_HOST6" -s "$1" -n "$2"
  local rc=$?; FIG="$(usec "$T/guest.txt") us/iter"
  [ $rc = 0 ] && grep -q "GID 2001:db8:4791::11" "$T/host.txt"
}

# ---- perf ---------------------------------------------------------------------------------
# perftest in guest N: device, GID index, no CPU frequency check.
pt() { echo "-d rxe0 -x $(eval echo "\$G4_${1:-1}") -F"; }
perf_emu_client() { # TEST "ARGS" (the same args both sides, perftest syntax)
  emu_client "ib_$1_bw $(pt) $2" perf "$1" --bind "$LAB_HOST4" --json $2
  local rc=$?; FIG=$(mbps_json "$T/host.txt"); return $rc
}
perf_emu_server() {
  emu_server "ib_$1_bw $(pt) $2 $LAB_HOST4" perf "$1" --bind "$LAB_HOST4" --json $2
  local rc=$?; FIG=$(mbps_table "$T/guest.txt"); return $rc
}
perf_rxe_rxe() {
  rxe_rxe "ib_$1_bw $(pt 1) $2" "ib_$1_bw $(pt 2) $2"
  local rc=$?; FIG=$(mbps_table "$T/guest2.txt"); return $rc
}

# Latency: ib_write_lat / ib_send_lat (t_typical: half the round trip, microseconds).
typical() { awk '/#bytes/{getline; print $5 " us typical"}' "$1" | tail -1; }
lat_emu_client() { # TEST "ARGS"
  emu_client "ib_$1_lat $(pt) $2" perf "$1" --lat --bind "$LAB_HOST4" $2
  local rc=$?; FIG=$(typical "$T/host.txt")
  [ $rc = 0 ] && grep -q "t_typical" "$T/guest.txt"
}
lat_emu_server() {
  emu_server "ib_$1_lat $(pt) $2 $LAB_HOST4" perf "$1" --lat --bind "$LAB_HOST4" $2
  local rc=$?; FIG=$(typical "$T/guest.txt")
  [ $rc = 0 ] && grep -q "t_typical" "$T/host.txt"
}
lat_rxe_rxe() {
  rxe_rxe "ib_$1_lat $(pt 1) $2" "ib_$1_lat $(pt 2) $2"
  local rc=$?; FIG=$(typical "$T/guest2.txt"); return $rc
}

# ---- faults -------------------------------------------------------------------------------
# Loss both ways and reordering: nft in the namespace drops 5% of the RoCE packets in each
# direction on guest 1's tap (a netdev table: ingress = from the guest, egress = to it)
# during the first MiB each way, and netem in the guest delays its packets 1 ms but sends
# 2% of them at once, ahead of the others. The loss stops after the first MiB because an
# ibv_rc_pingpong run ends with a message whose ACK nobody waits for: the side that
# finished exits (rxe destroys the QP), and if that ACK is lost the other side's resend finds
# no QP; two real ibv_rc_pingpongs fail the same way. Everything before is fair game.
# Between two guests (rxe-rxe tests) both get the netem rule, so that the requester's
# packets are reordered whichever guest it is, as they are when guest 1 talks to roce-emu.
loss_guests() { if [[ "$T" == *rxe-rxe* ]]; then echo 1 2; else echo 1; fi; }
loss_on() {
  local g
  for g in $(loss_guests); do
    g_run "$g" "/sbin/tc qdisc add dev eth0 root netem delay 1ms reorder 2%" >> "$T/netem.txt" 2>&1 || return 1
  done
  h nft -f - <<EOF
table netdev roceemu_loss {
  chain to_guest {
    type filter hook egress device "rltap1" priority 0;
    udp dport 4791 quota until 1 mbytes numgen random mod 100 < 5 counter drop
  }
  chain from_guest {
    type filter hook ingress device "rltap1" priority 0;
    udp dport 4791 quota until 1 mbytes numgen random mod 100 < 5 counter drop
  }
}
EOF
}
loss_off() {
  h nft list table netdev roceemu_loss > "$T/nft.txt" 2>&1
  h nft delete table netdev roceemu_loss 2>/dev/null
  local g
  for g in $(loss_guests); do
    g_run "$g" "/sbin/tc -s qdisc show dev eth0; /sbin/tc qdisc del dev eth0 root" >> "$T/netem.txt" 2>&1
  done
}
with_loss() {
  loss_on || { echo "could not set up loss" > "$T/host.txt"; return 1; }
  "$@"; local rc=$?
  loss_off
  local d; d=$(grep -o 'packets [0-9]*' "$T/nft.txt" | awk '{print $2}' | paste -sd/)
  FIG="$FIG; dropped to/from rxe: ${d:-?}"
  return $rc
}
# RNR: 8 SENDs back to back into a receive queue of one WQE (the peer answers RNR NAK and
# the requester waits out the timer and resends). When roce-emu is the responder it re-posts
# its one receive only 5 ms after each completion (--recv-hold-us): under TCG rxe's SENDs
# can arrive further apart than a polling NIC takes to re-post, and then no RNR happens at
# all (a CI run saw 0 of 50).
counter() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["counters"].get(sys.argv[2],0))' "$T/host.txt" "$1" 2>/dev/null; }
rnr_emu_client() {
  emu_client "ib_send_bw $(pt) -s 64 -n 50 -r 1" perf send --bind "$LAB_HOST4" --json -s 64 -n 50 -t 8
  local rc=$? rnr; rnr=$(counter rcvd_rnr_err)
  FIG="RNR NAKs received by roce-emu: ${rnr:-?}"
  [ $rc = 0 ] && [ "${rnr:-0}" -gt 0 ]
}
rnr_emu_server() {
  emu_server "ib_send_bw $(pt) -s 64 -n 50 -t 8 $LAB_HOST4" perf send --bind "$LAB_HOST4" --json -s 64 -n 50 -r 1 --recv-hold-us 5000
  local rc=$? rnr; rnr=$(counter send_rnr_err)
  FIG="RNR NAKs sent by roce-emu: ${rnr:-?}"
  [ $rc = 0 ] && [ "${rnr:-0}" -gt 0 ]
}
# Remote access error: the client WRITEs 64 KiB into a server buffer registered for 4 KiB
# (perftest: 2 x max(size, 4096)): the responder NAKs (remote access error) and the
# requester's completion says REM_ACCESS_ERR.
access_emu_requester() {
  # Both sides fail by design: what matters is how.
  emu_client "ib_write_bw $(pt) -s 4096 -n 5" perf write --bind "$LAB_HOST4" -s 65536 -n 5
  POST="nak_on_wire $S1"
  FIG="roce-emu: $(grep -o 'remote access error' "$T/host.txt" | head -1)"
  [ "$HOST_RC" != 0 ] && grep -q "RDMA WRITE 1 of 5 failed: remote access error" "$T/host.txt"
}
access_rxe_requester() {
  emu_server "ib_write_bw $(pt) -s 65536 -n 5 $LAB_HOST4" perf write --bind "$LAB_HOST4" -s 4096 -n 5
  POST="nak_on_wire $LAB_HOST4"
  FIG="rxe: $(grep -io 'status[^,]*10\|remote access' "$T/guest.txt" | head -1)"
  [ "$HOST_RC" != 0 ] && grep -q "QpAccessError" "$T/host.txt" && grep -qi "status.*10\|REM_ACCESS" "$T/guest.txt"
}
# The NAK on the wire, from the responder (checked on the closed capture).
nak_on_wire() { # FROM
  "$BIN" pcap "$T/capture.pcap" > "$T/decoded.txt" 2>&1
  # `roce-emu pcap` lines: N TIME [in|out] SRC:PORT -> DST:PORT ...
  grep -F " $1:" "$T/decoded.txt" | grep -E " $1:[0-9]+ -> " | grep -q "NAK remote access error"
}

# ---- the drop-in: Debian's unmodified programs on roce-emu's libibverbs.so.1 ---------------
# The host side is the real ibv_rc_pingpong / perftest binary, run in the namespace with our
# library first on its library path and one device, rxe0, whose GID index 1 is
# ::ffff:198.18.0.1 (RoCE v2; index 0 is the link-local default GID, as on rxe). The first
# line of host.txt is the command as run.
# DROPIN_PORT, when set, is the device's port instead of the bridge's address (the daemon-*
# tests: daemon:SOCKET).
dropin_cmd() { # PROGRAM ARGS...: runs it on the host side, output in $T/host.txt
  local prog=$1 port=${DROPIN_PORT:-$LAB_HOST4}; shift
  echo "+ LD_LIBRARY_PATH=$DROPIN:$DEBIAN_LIBS ROCE_EMU_DEVICES=rxe0=$port $prog $*" > "$T/host.txt"
  h env LD_LIBRARY_PATH="$DROPIN:$DEBIAN_LIBS" ROCE_EMU_DEVICES="rxe0=$port" \
    timeout 100 "$DEBIAN/usr/bin/$prog" "$@" < /dev/null >> "$T/host.txt" 2>&1
}
# dropin_client GUEST_CMD PROGRAM ARGS...: guest 1 serves, the Debian program connects. Neither
# real tool retries its connect, and probing the port would be taken for the client, so the
# guest reports its server listening (TCP 18515 in LISTEN in /proc/net/tcp*) through a file
# in the shared folder.
dropin_client() {
  local gcmd=$1 k rc grc w=0 flag=$LAB_RUN/g1/listening; shift
  rm -f "$flag"
  k=$(g_start 1 "${GUEST_PRE:-}$gcmd & p=\$!; i=0; while [ \$i -lt 300 ] && ! grep -q ':4853 0*:0000 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null; do sleep 0.1; i=\$((i + 1)); done; : > /lab/g1/listening; wait \$p" 110)
  until [ -f "$flag" ]; do sleep 0.1; w=$((w + 1)); [ $w -lt 400 ] || break; done
  dropin_cmd "$@" "$S1"; rc=$?
  g_wait 1 "$k" 120; grc=$?; g_out 1 "$k" > "$T/guest.txt"
  HOST_RC=$rc
  [ $rc = 0 ] && [ $grc = 0 ]
}
# dropin_server GUEST_CMD PROGRAM ARGS...: the Debian program serves, guest 1 connects once it
# listens.
dropin_server() {
  local gcmd=$1 hp k rc grc w=0; shift
  dropin_cmd "$@" &
  hp=$!
  until h ss -Hltn 'sport = :18515' 2>/dev/null | grep -q .; do
    sleep 0.1; w=$((w + 1)); [ $w -lt 200 ] && kill -0 $hp 2>/dev/null || break
  done
  k=$(g_start 1 "${GUEST_PRE:-}$gcmd $LAB_HOST4" 110)
  g_wait 1 "$k" 120; grc=$?; g_out 1 "$k" > "$T/guest.txt"
  wait $hp; rc=$?
  HOST_RC=$rc
  [ $rc = 0 ] && [ $grc = 0 ]
}
# Every RoCE frame on the bridge decodes, with a valid ICRC (checked on the closed capture;
# `roce-emu pcap` ends "N frames, R RoCEv2, S skipped, M malformed, B bad ICRC").
icrc_ok() {
  "$BIN" pcap "$T/capture.pcap" > "$T/decoded.txt" 2> "$T/icrc.txt"; local rc=$? sum
  sum=$(tail -1 "$T/icrc.txt"); sum=${sum#*: }
  FIG="$FIG; capture: $sum"
  [ $rc = 0 ] && [[ "$sum" =~ \ [1-9][0-9]*\ RoCEv2,.*\ 0\ malformed,\ 0\ bad\ ICRC ]]
}
# The perftest result row "SIZE ITERS ..." (both sides print it).
pt_row() { # FILE SIZE ITERS
  awk -v s="$2" -v n="$3" '/#bytes/{getline; if ($1 == s && $2 == n) ok = 1} END {exit !ok}' "$1"
}
dropin_pp() { # host-server|host-client SIZE MTU ITERS
  local role=$1 rc; shift
  local args=(-g 1 -s "$1" -m "$2" -n "$3")
  POST=icrc_ok
  if [ "$role" = host-server ]; then
    dropin_server "$(rcpp "$G4_1" "$@")" ibv_rc_pingpong -d rxe0 "${args[@]}"
    rc=$?; FIG="$(usec "$T/guest.txt") us/iter (rxe), $(usec "$T/host.txt") us/iter (drop-in)"
  else
    dropin_client "$(rcpp "$G4_1" "$@")" ibv_rc_pingpong -d rxe0 "${args[@]}"
    rc=$?; FIG="$(usec "$T/host.txt") us/iter (drop-in), $(usec "$T/guest.txt") us/iter (rxe)"
  fi
  [ $rc = 0 ] && grep -q "$3 iters in" "$T/host.txt" && grep -q "$3 iters in" "$T/guest.txt"
}
dropin_perf() { # host-server|host-client TEST SIZE ITERS [MTU] (perftest ib_TEST_bw, both sides)
  local role=$1 test=$2 rc; shift 2
  local args=(-s "$1" -n "$2" -m "${3:-4096}")
  POST=icrc_ok
  if [ "$role" = host-server ]; then
    dropin_server "ib_${test}_bw $(pt) ${args[*]}" "ib_${test}_bw" -d rxe0 -x 1 -F "${args[@]}"
    rc=$?; FIG="$(mbps_table "$T/guest.txt") (rxe client)"
  else
    dropin_client "ib_${test}_bw $(pt) ${args[*]}" "ib_${test}_bw" -d rxe0 -x 1 -F "${args[@]}"
    rc=$?; FIG="$(mbps_table "$T/host.txt") (drop-in client)"
  fi
  [ $rc = 0 ] && pt_row "$T/host.txt" "$1" "$2" && pt_row "$T/guest.txt" "$1" "$2"
}

# The other QP types, with Debian's own pingpongs on both sides: UD (one datagram per message,
# address handles, the 40-byte GRH slot), UC (no ACKs) and an SRQ shared by 8 RC QPs. Sizes fit
# a 1024-byte path MTU in one UD datagram (ibv_ud_pingpong refuses a size over the port's
# active MTU; rxe on the 9000-byte bridge has 4096) and span several packets for UC and SRQ.
# ibv_srq_pingpong prints its total over all QPs ("N iters in"): the figure is usec/iter.
qpt_cmd() { # ud|uc|srq GID_INDEX SIZE ITERS: the program and its arguments
  case $1 in
    ud) echo "ibv_ud_pingpong -d rxe0 -g $2 -s $3 -n $4 -c" ;;
    uc) echo "ibv_uc_pingpong -d rxe0 -g $2 -s $3 -m 1024 -n $4 -c" ;;
    srq) echo "ibv_srq_pingpong -d rxe0 -g $2 -s $3 -m 1024 -q 8 -n $4 -c" ;;
  esac
}
qpt_done() { grep -q " iters in .* usec/iter" "$1"; }
# The drop-in device's GID index of its address (::ffff:198.18.0.1, RoCE v2), as
# `ibv_devinfo -v` lists it: 0 while the device has one GID, 1 in a table like rxe's.
dropin_gid() {
  h env LD_LIBRARY_PATH="$DROPIN:$DEBIAN_LIBS" ROCE_EMU_DEVICES="rxe0=$LAB_HOST4" \
    "$DEBIAN/usr/bin/ibv_devinfo" -v -d rxe0 2>/dev/null |
    sed -n "s/.*GID\[ *\([0-9]*\)\]:[[:space:]]*::ffff:$LAB_HOST4, RoCE v2.*/\1/p" | head -1
}
dropin_qpt() { # ud|uc|srq host-server|host-client SIZE ITERS
  local type=$1 role=$2 rc gid; shift 2
  gid=$(dropin_gid)
  [ -n "$gid" ] || { echo "no GID ::ffff:$LAB_HOST4 on the drop-in's rxe0" > "$T/host.txt"; return 1; }
  local -a host; read -ra host <<< "$(qpt_cmd "$type" "$gid" "$@")"
  POST=icrc_ok
  if [ "$role" = host-server ]; then
    dropin_server "$(qpt_cmd "$type" "$G4_1" "$@")" "${host[@]}"
  else
    dropin_client "$(qpt_cmd "$type" "$G4_1" "$@")" "${host[@]}"
  fi
  rc=$?; FIG="$(usec "$T/host.txt") us/iter (drop-in), $(usec "$T/guest.txt") us/iter (rxe)"
  [ $rc = 0 ] && qpt_done "$T/host.txt" && qpt_done "$T/guest.txt"
}
qpt_rxe_rxe() { # ud|uc|srq SIZE ITERS
  POST=icrc_ok
  rxe_rxe "$(qpt_cmd "$1" "$G4_1" "$2" "$3")" "$(qpt_cmd "$1" "$G4_2" "$2" "$3")"
  local rc=$?; FIG="$(usec "$T/guest2.txt") us/iter"
  [ $rc = 0 ] && qpt_done "$T/guest1.txt" && qpt_done "$T/guest2.txt"
}

# The GID table: rxe's in guest 1 (ibv_devinfo -v's GID lines) against the drop-in's, with
# zero set-up, for an interface set up as the guest's eth0 (its MAC, IPv4 and IPv6
# addresses) on a veth in a namespace of its own: the same lines (src/verbs/gids.rs).
dropin_gids() {
  g_run 1 'ip -o link show eth0; ip -o addr show eth0; ibv_devinfo -v -d rxe0' > "$T/guest.txt" 2>&1 || return 1
  local mac ip4 ip6 ns=roceemu-gids-$$ rc
  mac=$(grep -o 'link/ether [0-9a-f:]*' "$T/guest.txt" | head -1 | cut -d' ' -f2)
  ip4=$(awk '$3 == "inet" { print $4; exit }' "$T/guest.txt")
  ip6=$(awk '$3 == "inet6" && $4 !~ /^fe80/ { print $4; exit }' "$T/guest.txt")
  [ -n "$mac" ] && [ -n "$ip4" ] && [ -n "$ip6" ] || { FIG="guest 1's eth0 unread"; return 1; }
  ip netns add "$ns" || return 1
  { ip -n "$ns" link set lo up &&
    ip -n "$ns" link add eth0 type veth peer name eth9 &&
    ip -n "$ns" link set eth0 address "$mac" &&
    ip -n "$ns" addr add "$ip4" dev eth0 &&
    ip -n "$ns" addr add "$ip6" dev eth0 nodad &&
    ip -n "$ns" link set eth9 up && ip -n "$ns" link set eth0 up &&
    echo "+ (eth0 $mac $ip4 $ip6) ibv_devinfo -v -d rxe0" > "$T/host.txt" &&
    ip netns exec "$ns" env -u ROCE_EMU_DEVICES LD_LIBRARY_PATH="$DROPIN:$DEBIAN_LIBS" \
      timeout 60 "$DEBIAN/usr/bin/ibv_devinfo" -v -d rxe0 < /dev/null >> "$T/host.txt" 2>&1; }
  rc=$?
  ip netns del "$ns"
  [ $rc = 0 ] || return 1
  diff <(grep 'GID\[' "$T/guest.txt") <(grep 'GID\[' "$T/host.txt") > "$T/diff.txt"
  rc=$?
  FIG="rxe: $(grep -c 'GID\[' "$T/guest.txt") GIDs ($(grep 'GID\[' "$T/guest.txt" | awk '{print $3}' | tr -d , | paste -sd' '))"
  [ $rc = 0 ] || FIG="$FIG; the drop-in's differ (diff.txt)"
  return $rc
}

# ---- daemons: Debian's programs on the drop-in, attached to a roce-emu daemon --------------
# `roce-emu daemon` owns a port with its own L2 on the lab bridge: a TAP it creates (a MAC of
# its own behind it), or an AF_PACKET socket on one end of a veth pair whose other end is on
# the bridge (the veth's MAC; no kernel address on it, arp_ignore=8: the daemon answers ARP
# for its address, the kernel never does). The Debian program attaches with
# ROCE_EMU_DEVICES=rxe0=daemon:SOCKET: its GID index 1 is the daemon's address, while its
# TCP exchange runs over the namespace's own address on the bridge (the daemon's address is
# not the kernel's). The guest forgets the daemon's address first (each test's daemon has a
# new MAC). Each test starts its own daemon and stops it by PID with SIGTERM: it must exit
# 0 and remove its socket, and its TAP (the daemon's own) must be gone, the veth (not its
# own) still there. The TAP has the kernel's default MTU, 1500 (RoCE MTU 1024); the veth
# 9000 (RoCE MTU 4096).
DAEMON_TAP_ADDR=198.18.0.21   # the namespace is .1, the guests .11 and .12
DAEMON_AFP_ADDR=198.18.0.22
DAEMON_TAP=rdlab0
DAEMON_VETH=rdveth0           # on the bridge; its peer rdveth1 is the daemon's
DPID=
daemon_up() { # tap|afpacket: starts the test's daemon; sets DKIND DPID DSOCK DADDR DIFACE
  local port w=0
  DKIND=$1
  DSOCK=${TMPDIR:-/tmp}/roce-emu-interop.$$.$DKIND.sock
  rm -f "$DSOCK"
  if [ "$DKIND" = tap ]; then
    DADDR=$DAEMON_TAP_ADDR; DIFACE=$DAEMON_TAP; port=tap:$DIFACE,$DADDR/24
  else
    DADDR=$DAEMON_AFP_ADDR; DIFACE=rdveth1; port=afpacket:$DIFACE,$DADDR
    h ip link add "$DAEMON_VETH" mtu 9000 type veth peer name "$DIFACE" mtu 9000 || return 1
    h sysctl -qw "net.ipv6.conf.$DIFACE.disable_ipv6=1" "net.ipv4.conf.$DIFACE.arp_ignore=8"
    h ip link set "$DIFACE" up
    h ip link set "$DAEMON_VETH" master "$LAB_BR" up
  fi
  echo "+ roce-emu daemon --port $port --socket $DSOCK" > "$T/daemon.txt"
  # `ip netns exec` execs: $! is the daemon itself.
  ip netns exec "$LAB_NS" "$BIN" daemon --port "$port" --socket "$DSOCK" >> "$T/daemon.txt" 2>&1 &
  DPID=$!
  until [ -S "$DSOCK" ]; do
    sleep 0.1; w=$((w + 1))
    kill -0 "$DPID" 2>/dev/null && [ $w -lt 100 ] || { echo "no socket after $((w / 10)) s" >> "$T/daemon.txt"; return 1; }
  done
  if [ "$DKIND" = tap ]; then h ip link set "$DIFACE" master "$LAB_BR" || return 1; fi
  h ip -d link show "$DIFACE" >> "$T/daemon.txt" 2>&1
}
daemon_down() { # stops the test's daemon (SIGTERM by PID); fails unless it exits 0 and cleans up
  local rc=0 drc w=0
  if [ -n "$DPID" ]; then
    "$BIN" counters --daemon "$DSOCK" --json > "$T/counters.json" 2>&1
    # Where frames may have been lost on the way in: the interface's counters, and the
    # daemon's packet socket (its receive buffer and drops: `d` in skmem).
    { h ip -s link show "$DIFACE"; [ "$DKIND" = tap ] || h ss -0 -a -m -p; } > "$T/link.txt" 2>&1
    kill -TERM "$DPID" 2>/dev/null
    while kill -0 "$DPID" 2>/dev/null; do
      sleep 0.1; w=$((w + 1))
      [ $w -lt 100 ] || { echo "still running 10 s after SIGTERM: SIGKILL" >> "$T/daemon.txt"; kill -KILL "$DPID"; break; }
    done
    wait "$DPID"; drc=$?; DPID=
    echo "+ daemon exit status $drc" >> "$T/daemon.txt"
    [ $drc = 0 ] || rc=1
  fi
  if [ -e "$DSOCK" ]; then echo "its socket $DSOCK is still there" >> "$T/daemon.txt"; rc=1; rm -f "$DSOCK"; fi
  if [ "$DKIND" = tap ]; then
    if h ip link show "$DIFACE" >/dev/null 2>&1; then
      echo "its TAP $DIFACE is still there" >> "$T/daemon.txt"; rc=1; h ip link del "$DIFACE"
    fi
  else
    h ip link show "$DIFACE" >/dev/null 2>&1 || { echo "the veth $DIFACE is gone" >> "$T/daemon.txt"; rc=1; }
    h ip link del "$DAEMON_VETH" 2>/dev/null
  fi
  return $rc
}
# The GID guest 1 was sent (ibv_rc_pingpong prints ::ffff:A.B.C.D, perftest the 16 bytes in
# decimal) is the daemon's address.
gid_sent_is() { # FILE ADDR
  local o; IFS=. read -ra o <<< "$2"
  grep -qE "GID ::ffff:$2\b|GID: (00:){10}255:255:$(printf '%02d:%02d:%02d:%02d' "${o[@]}")" "$1"
}
# The closed capture: valid ICRCs (icrc_ok), and every RoCE frame between the daemon's
# address and guest 1's, both ways.
daemon_capture_ok() {
  icrc_ok || return 1
  # `roce-emu pcap` lines: N TIME [in|out] SRC:PORT -> DST:PORT ...
  awk -v a="$DADDR" -v b="$S1" '
    { k = 0; for (i = 2; i < NF; i++) if ($i == "->") { k = i; break } }
    k { split($(k - 1), s, ":"); split($(k + 1), d, ":")
      if (s[1] == a && d[1] == b) ab++; else if (s[1] == b && d[1] == a) ba++; else bad++ }
    END { printf "%d frames daemon->rxe, %d rxe->daemon, %d other\n", ab, ba, bad; exit !(ab && ba && !bad) }' \
    "$T/decoded.txt" > "$T/addresses.txt"
}
daemon_test() { # tap|afpacket pp|perf ARGS... (of dropin_pp / dropin_perf)
  local kind=$1 what=$2 rc drc sent rcvd; shift 2
  if daemon_up "$kind"; then
    DROPIN_PORT=daemon:$DSOCK GUEST_PRE="/sbin/ip neigh flush to $DADDR 2>/dev/null; " "dropin_$what" "$@"; rc=$?
    # Whose MAC rxe used for the daemon's address (ARP answered by the daemon's L2).
    g_run 1 "/sbin/ip neigh show $DADDR" > "$T/guest-neigh.txt" 2>&1
  else
    rc=1; FIG="the daemon did not start"
  fi
  daemon_down; drc=$?
  POST=daemon_capture_ok
  read -r rcvd sent mac < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); c=j["counters"]; print(c["rcvd_pkts"], c["sent_pkts"], ":".join("%02x" % b for b in j["port"]["mac"]))' "$T/counters.json" 2>/dev/null)
  FIG="$FIG; daemon ($kind, $DADDR): ${rcvd:-?} pkts in, ${sent:-?} out"
  if [ "$kind" = afpacket ]; then
    local d; d=$(sed -n 's/.*"roce-emu".*skmem:.*,d\([0-9]*\)).*/\1/p' "$T/link.txt")
    FIG="$FIG, ${d:-?} dropped by its packet socket"
  fi
  [ $drc = 0 ] || FIG="$FIG; daemon did not stop cleanly (daemon.txt)"
  gid_sent_is "$T/guest.txt" "$DADDR" || { FIG="$FIG; rxe was not sent the daemon's GID"; rc=1; }
  grep -q "lladdr ${mac:-?} " "$T/guest-neigh.txt" || { FIG="$FIG; rxe's neighbour entry is not the daemon's MAC ${mac:-?}"; rc=1; }
  [ $rc = 0 ] && [ $drc = 0 ]
}

# ---- conformance: the spec/ scripts against rxe ------------------------------------------
# The agent listens on TCP 7471 in guest 1 (rxe0; its hello gives the IPv4 RoCE v2 GID's
# address); `roce-emu conform` plays each script's peer from the bridge's address. rxe runs
# under TCG here: every time bound is scaled by 5. The matrix (the runner's stdout) is
# matrix.txt, also as matrix.json; the agent's output is guest.txt. The verdict is the
# runner's: every script passed, or failed only where a `note rxe` line expects it. host.txt
# has the command, the runner's stderr and its exit status. ROCE_CONFORM_SPEC names other
# scripts (a file or a folder) instead of spec/.
CONFORM_PORT=7471
conform_rxe() {
  local k rc w=0 flag=$LAB_RUN/g1/conform-listening
  cp "$AGENT" "$LAB_RUN/conform-agent" || return 1
  rm -f "$flag" "$LAB_RUN/g1/conform-agent.pid"
  # The agent's first line on stdout says it listens; its PID is kept to stop it after.
  k=$(g_start 1 "/lab/conform-agent -d rxe0 -p $CONFORM_PORT > /lab/g1/conform-agent.txt 2>&1 & p=\$!; echo \$p > /lab/g1/conform-agent.pid; i=0; while [ \$i -lt 300 ] && ! grep -q listening /lab/g1/conform-agent.txt 2>/dev/null; do sleep 0.1; i=\$((i + 1)); done; : > /lab/g1/conform-listening; wait \$p" 3600)
  until [ -f "$flag" ]; do sleep 0.1; w=$((w + 1)); [ $w -lt 400 ] || break; done
  if ! grep -q listening "$LAB_RUN/g1/conform-agent.txt" 2>/dev/null; then
    FIG="the agent did not start in guest 1"
    rc=1
  else
    local args=(conform --target "rxe=$S1:$CONFORM_PORT" --peer-ip "$LAB_HOST4" --time-scale 5
                --json "$T/matrix.json" "${ROCE_CONFORM_SPEC:-$root/spec/}")
    echo "+ roce-emu ${args[*]}" > "$T/host.txt"
    h timeout 3000 "$BIN" "${args[@]}" > "$T/matrix.txt" 2>> "$T/host.txt"
    rc=$?
    echo "+ exit status $rc (the matrix: matrix.txt)" >> "$T/host.txt"
    FIG=$(grep -v '^[[:space:]]*$' "$T/matrix.txt" | tail -1 | sed 's/^ *//')
    [ -n "$FIG" ] || FIG=$(grep -v '^+ ' "$T/host.txt" | tail -1)
  fi
  g_run 1 "kill \"\$(cat /lab/g1/conform-agent.pid)\"" > /dev/null 2>&1
  g_wait 1 "$k" 30; g_out 1 "$k" > "$T/guest.txt"
  cat "$LAB_RUN/g1/conform-agent.txt" >> "$T/guest.txt" 2>/dev/null
  return $rc
}

# ---- the run ------------------------------------------------------------------------------
t_boot=$(date +%s.%N)
lab_up 2
echo "lab: 2 guests up in $(python3 -c "import time;print(f'{time.time()-$t_boot:.1f}')") s ($LAB_ACCEL), rxe GIDs: IPv4 index $G4_1, IPv6 index $G6_1; output in $OUT"

for m in 1024 4096; do
  for s in 1 64 4096 10000; do
    run_test "pingpong-emu-client-m$m-s$s" pp_emu_client "$s" "$m" 100 -c
    run_test "pingpong-emu-server-m$m-s$s" pp_emu_server "$s" "$m" 100 -c
  done
done
for s in 64 4096; do run_test "pingpong-rxe-rxe-m1024-s$s" pp_rxe_rxe "$s" 1024 100 -c; done
run_test "pingpong-ipv6-emu-client" pp6_emu_client 256 50
run_test "pingpong-ipv6-emu-server" pp6_emu_server 256 50

for op in write read send; do
  run_test "perf-$op-emu-client" perf_emu_client "$op" "-s 65536 -n 200 -m 4096"
  run_test "perf-$op-emu-server" perf_emu_server "$op" "-s 65536 -n 200 -m 4096"
  run_test "perf-$op-rxe-rxe" perf_rxe_rxe "$op" "-s 65536 -n 200 -m 4096"
done
for a in CMP_AND_SWAP FETCH_AND_ADD; do
  run_test "perf-atomic-$a-emu-client" perf_emu_client atomic "-A $a -n 500"
  run_test "perf-atomic-$a-emu-server" perf_emu_server atomic "-A $a -n 500"
  run_test "perf-atomic-$a-rxe-rxe" perf_rxe_rxe atomic "-A $a -n 500"
done

for op in write send; do
  run_test "lat-$op-emu-client" lat_emu_client "$op" "-s 8 -n 500"
  run_test "lat-$op-emu-server" lat_emu_server "$op" "-s 8 -n 500"
  run_test "lat-$op-rxe-rxe" lat_rxe_rxe "$op" "-s 8 -n 500"
done

# Debian's own binaries on the drop-in (the host side) against rxe.
run_test "dropin-rc_pingpong-host-server" dropin_pp host-server 4096 1024 300
run_test "dropin-rc_pingpong-host-client" dropin_pp host-client 4096 1024 300
for op in write read; do
  run_test "dropin-${op}_bw-host-server" dropin_perf host-server "$op" 65536 200
  run_test "dropin-${op}_bw-host-client" dropin_perf host-client "$op" 65536 200
done

# UD, UC and SRQ: Debian's pingpongs, rxe against rxe first (the commands' baseline), then the
# drop-in in both roles.
for t in ud:1024:200 uc:4096:200 srq:4096:50; do
  IFS=: read -r q s n <<< "$t"
  run_test "${q}_pingpong-rxe-rxe" qpt_rxe_rxe "$q" "$s" "$n"
  run_test "dropin-${q}_pingpong-host-server" dropin_qpt "$q" host-server "$s" "$n"
  run_test "dropin-${q}_pingpong-host-client" dropin_qpt "$q" host-client "$s" "$n"
done
run_test "dropin-gid-table" dropin_gids

# rdma_cm: Debian's rdmacm-utils rxe against rxe (the baseline of the drop-in librdmacm).
for p in rping ucmatose udaddy; do run_test "$p-rxe-rxe" cm_rxe_rxe "$p"; done
run_test "rping-rej-rxe-rxe" cm_rej_rxe_rxe
for p in rping ucmatose udaddy; do
  for r in host-server host-client; do run_test "dropin-$p-$r" cm_dropin "$p" "$r"; done
done

# The same programs through a roce-emu daemon on its own L2 port on the bridge.
run_test "daemon-tap-rc_pingpong-host-server" daemon_test tap pp host-server 4096 1024 300
run_test "daemon-tap-rc_pingpong-host-client" daemon_test tap pp host-client 4096 1024 300
run_test "daemon-tap-write_bw-host-server" daemon_test tap perf host-server write 65536 200 1024
run_test "daemon-tap-write_bw-host-client" daemon_test tap perf host-client write 65536 200 1024
run_test "daemon-afpacket-rc_pingpong-host-server" daemon_test afpacket pp host-server 4096 4096 300
run_test "daemon-afpacket-rc_pingpong-host-client" daemon_test afpacket pp host-client 4096 4096 300
run_test "daemon-afpacket-write_bw-host-server" daemon_test afpacket perf host-server write 65536 200 4096
run_test "daemon-afpacket-write_bw-host-client" daemon_test afpacket perf host-client write 65536 200 4096

run_test "loss-pingpong-emu-client" with_loss pp_emu_client 4096 1024 200 -c
run_test "loss-pingpong-emu-server" with_loss pp_emu_server 4096 1024 200 -c
run_test "loss-write-emu-client" with_loss perf_emu_client write "-s 65536 -n 200"
run_test "loss-write-emu-server" with_loss perf_emu_server write "-s 65536 -n 200"
# The same rules between two guests: all of guest 1's traffic crosses rltap1.
run_test "loss-pingpong-rxe-rxe" with_loss pp_rxe_rxe 4096 1024 200 -c
run_test "loss-write-rxe-rxe" with_loss perf_rxe_rxe write "-s 65536 -n 200"

run_test "rnr-emu-requester" rnr_emu_client
run_test "rnr-rxe-requester" rnr_emu_server
run_test "access-emu-requester" access_emu_requester
run_test "access-rxe-requester" access_rxe_requester

run_test "conform-rxe" conform_rxe

echo
echo "summary (rxe under TCG in qemu: the guest is the bottleneck; figures: roce-emu side's view)"
printf '%s\n' "${SUMMARY[@]}"
echo "interop: $PASS passed, $FAIL failed"
[ $FAIL = 0 ]
