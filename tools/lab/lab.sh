# shellcheck shell=bash
# The lab at run time (sourced by interop.sh; `bash lab.sh down` cleans up after a crash).
#   lab_up N          namespace, bridge (MTU 9000) and N taps; boots N guests (TCG unless a
#                     probe guest boots under KVM); waits until every agent is ready
#   g_start I 'CMD'   runs CMD in guest I in the background; prints its job number
#   g_wait I JOB SECS waits for it; returns its exit status (124 = timed out)
#   g_out I JOB       its output
#   h 'CMD...'        runs a command on the host side, inside the namespace
#   lab_down          stops the guests (agents told to stop, then qemu by PID) and deletes
#                     the namespace
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"

LAB_RUN=${LAB_RUN:-}
declare -a LAB_QEMU=()

h() { ip netns exec "$LAB_NS" "$@"; }

lab_accel() {
  # KVM only if a probe guest really boots (a PVM /dev/kvm hangs a stock kernel); cached
  # per host boot.
  local cache=$LAB_BUILD/kvm-probe boot log
  [ -w /dev/kvm ] || { echo tcg; return; }
  boot=$(cat /proc/sys/kernel/random/boot_id)
  if [ "$(head -n1 "$cache" 2>/dev/null)" != "$boot" ]; then
    log=$(mktemp)
    timeout -k 2 20 qemu-system-x86_64 -enable-kvm -cpu host -m 256 -nodefaults -display none \
      -no-reboot -serial "file:$log" -kernel "$LAB_BUILD/vmlinuz" -append "console=ttyS0 panic=-1" \
      >/dev/null 2>&1 || true
    if grep -q "Run /init as init process\|Kernel panic" "$log"; then r=kvm; else r=tcg; fi
    printf '%s\n%s\n' "$boot" "$r" > "$cache"; rm -f "$log"
  fi
  sed -n 2p "$cache"
}

lab_up() {
  local n=$1 i accel
  [ -n "$LAB_RUN" ] || LAB_RUN=$(mktemp -d /tmp/roce-emu-lab.XXXXXX)
  ip netns list | grep -qw "^$LAB_NS" && lab_down
  ip netns add "$LAB_NS"
  h ip link set lo up
  h ip link add "$LAB_BR" type bridge mcast_snooping 0
  # A MAC of its own: a bridge left to itself takes its lowest port's, so a port added or
  # removed later (the daemon-* tests' TAP and veth) could change it under the guests' ARP
  # entries for the host (a guest's SYN to the host then went unanswered for a minute).
  h ip link set "$LAB_BR" address "$LAB_BR_MAC"
  h ip addr add "$LAB_HOST4/24" dev "$LAB_BR"
  h ip -6 addr add "$LAB_HOST6/64" dev "$LAB_BR" nodad
  for i in $(seq 1 "$n"); do
    h ip tuntap add dev "rltap$i" mode tap
    h ip link set "rltap$i" mtu 9000 master "$LAB_BR" up
  done
  h ip link set "$LAB_BR" mtu 9000 up
  accel=$(lab_accel)
  local acc=(-accel tcg -cpu max)
  [ "$accel" = kvm ] && acc=(-enable-kvm -cpu host)
  LAB_ACCEL=$accel
  for i in $(seq 1 "$n"); do
    # A run folder used before (interop.sh --out DIR again) holds the last run's ready, gids,
    # next, cmd/stop and res/: the host would take the old guest for ready and the new agent
    # would run old commands, then stop.
    rm -rf "$LAB_RUN/g$i"
    mkdir -p "$LAB_RUN/g$i"
    # `ip netns exec` execs: $! is the qemu (under timeout) itself, not a subshell.
    ip netns exec "$LAB_NS" timeout -k 5 3600 qemu-system-x86_64 "${acc[@]}" -m 768 -smp 1 -nodefaults \
      -no-user-config -display none -no-reboot -serial "file:$LAB_RUN/g$i.console" \
      -kernel "$LAB_BUILD/vmlinuz" -initrd "$LAB_BUILD/initramfs.cpio" \
      -append "console=ttyS0 quiet panic=-1 lab.id=$i lab.ip=$(guest_ip4 "$i")/24 lab.ip6=$(guest_ip6 "$i")/64 lab.mtu=9000" \
      -netdev "tap,id=n0,ifname=rltap$i,script=no,downscript=no" \
      -device "virtio-net-pci,netdev=n0,mac=$(guest_mac "$i")" \
      -fsdev "local,id=fs0,path=$LAB_RUN,security_model=none" \
      -device virtio-9p-pci,fsdev=fs0,mount_tag=lab > "$LAB_RUN/g$i.qemu.log" 2>&1 &
    LAB_QEMU+=($!)
  done
  for i in $(seq 1 "$n"); do
    local w=0
    until [ -f "$LAB_RUN/g$i/ready" ]; do
      sleep 0.2; w=$((w + 1))
      [ $w -lt 600 ] || { tail -20 "$LAB_RUN/g$i.console" >&2; die "guest $i not ready in 120 s"; }
    done
    # shellcheck disable=SC1090
    . "$LAB_RUN/g$i/gids"; eval "G4_$i=$G4 G6_$i=$G6"
  done
}

# g_pause I / g_resume I: stop and continue guest I's qemu (SIGSTOP), so that a guest with
# nothing to do leaves the CPU to the others (under TCG even an idle guest's agent costs).
g_qemu_pid() { pgrep -P "${LAB_QEMU[$(($1 - 1))]}" qemu-system-x86 || echo "${LAB_QEMU[$(($1 - 1))]}"; }
g_pause() { kill -STOP "$(g_qemu_pid "$1")" 2>/dev/null || true; }
g_resume() { kill -CONT "$(g_qemu_pid "$1")" 2>/dev/null || true; }

g_start() { # g_start I 'CMD' [SECS]: prints the job number
  local i=$1 k
  # Numbered through a file: callers run this in $(...), a subshell.
  k=$(( $(cat "$LAB_RUN/g$i/next" 2>/dev/null || echo 0) + 1 ))
  echo "$k" > "$LAB_RUN/g$i/next"
  printf 'T=%s\n%s\n' "${3:-120}" "$2" > "$LAB_RUN/g$i/cmd/.$k"
  mv "$LAB_RUN/g$i/cmd/.$k" "$LAB_RUN/g$i/cmd/$k"
  echo "$k"
}

g_wait() { # g_wait I JOB SECS
  local f=$LAB_RUN/g$1/res/$2.rc w=0 lim=$(( ${3:-130} * 10 ))
  until [ -f "$f" ]; do sleep 0.1; w=$((w + 1)); [ $w -lt $lim ] || return 124; done
  return "$(cat "$f")"
}

g_out() { cat "$LAB_RUN/g$1/res/$2.out" 2>/dev/null; }

g_run() { # g_run I 'CMD' [SECS]: runs and waits; output on stdout
  local k; k=$(g_start "$1" "$2" "${3:-120}")
  g_wait "$1" "$k" "$(( ${3:-120} + 10 ))"; local rc=$?
  g_out "$1" "$k"; return $rc
}

lab_down() {
  local i p
  if [ -n "$LAB_RUN" ]; then
    for i in $(seq 1 ${#LAB_QEMU[@]}); do g_resume "$i"; done
    for d in "$LAB_RUN"/g*/cmd; do [ -d "$d" ] && : > "$d/stop"; done
    for p in "${LAB_QEMU[@]}"; do
      for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill "$p" 2>/dev/null || true
      wait "$p" 2>/dev/null || true
    done
  fi
  LAB_QEMU=()
  ip netns list | grep -qw "^$LAB_NS" && ip netns del "$LAB_NS"
  return 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    down) lab_down ;;
    *) echo "usage: lab.sh down   (the lab is driven by tools/lab/interop.sh)" >&2; exit 2 ;;
  esac
fi
