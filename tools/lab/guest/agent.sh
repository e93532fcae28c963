# The lab agent (busybox sh): runs the host's commands. The host writes a script to
# /lab/gN/cmd/K (K = 1, 2, ...; renamed into place when complete); the agent runs each in the
# background under `timeout` (first line of the script may set T=seconds, default 120) and
# leaves its output in /lab/gN/res/K.out and exit status in /lab/gN/res/K.rc. The file
# /lab/gN/cmd/stop ends the agent (the guest powers off).
D=/lab/g$LAB_ID
mkdir -p "$D/cmd" "$D/res"
gidx() { # gidx ipv4|ipv6: rxe0's GID index for the address family (RoCE v2 entries)
  for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
    i=${f##*/}; read -r g < "$f" || continue
    read -r t < "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i" 2>/dev/null || continue
    case "$t" in *v2*) ;; *) continue ;; esac
    case "$1:$g" in
      ipv4:0000:0000:0000:0000:0000:ffff:*) echo "$i"; return ;;
      ipv6:fe80:*|ipv6:0000:*) ;;
      ipv6:*) echo "$i"; return ;;
    esac
  done
}
echo "G4=$(gidx ipv4) G6=$(gidx ipv6)" > "$D/gids"
echo ready > "$D/ready"
k=1
while :; do
  if [ -f "$D/cmd/$k" ]; then
    (
      T=120; read -r first < "$D/cmd/$k"; case "$first" in T=*) T=${first#T=} ;; esac
      timeout "$T" sh "$D/cmd/$k" > "$D/res/$k.out" 2>&1 < /dev/null
      echo $? > "$D/res/$k.rc.tmp"; mv "$D/res/$k.rc.tmp" "$D/res/$k.rc"
    ) &
    k=$((k + 1))
  elif [ -f "$D/cmd/stop" ]; then
    wait; break
  else
    sleep 0.05
  fi
done
