#!/usr/bin/env bash
# A fleet of hosts on one machine: each host a network namespace with its own hostname (a UTS
# namespace held by a long-lived holder process), a coordinator and two clusters of two nodes,
# the clusters' LANs bridged, each cluster's uplink to the coordinator shaped as a WAN (rate by
# tbf on the uplink's veths, delay and loss by diloco-wan-delay in the cluster's router).
# Topology, addresses and what is recorded: deploy/hosts/README.md. Needs root.
#
# Usage:
#   hosts.sh up [--dir=D] [--prefix=P] [--loss=0.001] [--a_rate_mbit=100] [--a_rtt_ms=50]
#               [--b_rate_mbit=10] [--b_rtt_ms=150] [--jitter_frac=0.05] [--delay_bin=PATH]
#   hosts.sh down [--dir=D]             removes exactly what D/state records
#   hosts.sh exec [--dir=D] HOST -- CMD...   runs CMD on HOST (its network and UTS namespaces;
#                                       SLURM_CONF set once slurm.sh has started Slurm)
#   hosts.sh addr|pid [--dir=D] HOST    the host's address, or its holder process's PID
#   hosts.sh list [--dir=D]             "host namespace address holder-pid", one line each
#   hosts.sh links [--dir=D]            bytes and drops per WAN link and direction (tc counters)
#   hosts.sh check                      exit 0 if this machine can run it, else 77 and why
# D defaults to $HOSTS_DIR or /tmp/diloco-hosts; P (namespace names P-coord, P-a1, ...) to dh.
# A failed or interrupted `up` removes what it made; `up` first removes an earlier run's
# leftovers recorded in D/state.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=deploy/hosts/lib.sh
. "$here/lib.sh"

HOSTS_DIR=${HOSTS_DIR:-/tmp/diloco-hosts}
prefix=dh loss=0.001 a_rate=100 a_rtt=50 b_rate=10 b_rtt=150 jitter_frac=0.05
delay_bin=${DILOCO_BUILD:-$root/build/test}/benchmarks/wan/diloco-wan-delay

usage() { sed -n '/^# Usage:/,/^# A failed/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

check() {
  ((EUID == 0)) || { echo "skipped: not root (network namespaces need it)"; exit 77; }
  local c
  for c in ip tc nsenter unshare; do
    command -v $c >/dev/null || { echo "skipped: $c missing"; exit 77; }
  done
  [[ -c /dev/net/tun ]] || { echo "skipped: no /dev/net/tun"; exit 77; }
  local ns=dhchk$$
  ip netns add $ns 2>/dev/null || { echo "skipped: cannot create network namespaces"; exit 77; }
  if ! ip -n $ns link add b0 type bridge 2>/dev/null; then
    ip netns del $ns
    echo "skipped: no bridge support"
    exit 77
  fi
  ip netns del $ns
  exit 0
}

# A veth pair: $1 in namespace $2, $3 in namespace $4.
veth() { ip link add name "$1" netns "$2" type veth peer name "$3" netns "$4"; }

# tbf at $3 Mbit/s on device $2 of namespace $1, a queue of one bandwidth-delay product ($4 ms),
# at least 256 KiB (as benchmarks/wan/wan_net.sh: the sender's own offload packets queue there).
shape() {
  local burst=$(($3 * 125)) limit=$(($3 * 125 * $4))
  ((burst >= 6000)) || burst=6000
  ((limit >= 262144)) || limit=262144
  tc -n "$1" qdisc add dev "$2" root tbf rate "${3}mbit" burst "$burst" limit "$limit"
}

new_netns() {
  ip netns add "$1"
  record "hosts netns $1"
  ip -n "$1" link set lo up
}

# A host: namespace P-NAME, address $2/$3 on eth0 (its other end $4 in namespace $5), default
# route via $6, and the holder of its hostname.
new_host() {
  local name=$1 addr=$2 len=$3 peer=$4 peer_ns=$5 gw=$6 ns=$prefix-$1 pid
  new_netns "$ns"
  veth eth0 "$ns" "$peer" "$peer_ns"
  ip -n "$ns" addr add "$addr/$len" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$peer_ns" link set "$peer" up
  ip -n "$ns" route add default via "$gw"
  setsid nsenter --net="/var/run/netns/$ns" unshare --uts \
    sh -c "hostname $name && exec sleep infinity" </dev/null >/dev/null 2>&1 &
  pid=$!
  record_proc hosts "$pid" "holder-$name"
  for _ in $(seq 50); do
    [[ $(nsenter -t "$pid" --uts hostname 2>/dev/null) == "$name" ]] && break
    sleep 0.1
  done
  [[ $(nsenter -t "$pid" --uts hostname) == "$name" ]] || die "host $name: hostname not set"
  record "hosts host $name $ns $addr $pid"
}

# Cluster $1 (index $2): router namespace P-r$1 with a bridge for its nodes' LAN
# 10.210.$2.0/24, an uplink to the wan router shaped at $3 Mbit/s, and a delayer that holds
# every routed packet $4/2 ms.
new_cluster() {
  local c=$1 i=$2 rate=$3 rtt=$4 r=$prefix-r$1 w=$prefix-wan n
  new_netns "$r"
  ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
    net.ipv4.conf.default.rp_filter=0
  veth wan0 "$r" "u$c" "$w"
  ip -n "$r" addr add "10.210.1$i.2/24" dev wan0
  ip -n "$w" addr add "10.210.1$i.1/24" dev "u$c"
  ip -n "$r" link set wan0 up
  ip -n "$w" link set "u$c" up
  ip -n "$r" route add default via "10.210.1$i.1"
  ip -n "$w" route add "10.210.$i.0/24" via "10.210.1$i.2"
  shape "$r" wan0 "$rate" "$rtt"
  shape "$w" "u$c" "$rate" "$rtt"
  ip -n "$r" link add br0 type bridge
  ip -n "$r" addr add "10.210.$i.1/24" dev br0
  ip -n "$r" link set br0 up
  for n in 1 2; do
    new_host "$c$n" "10.210.$i.1$n" 24 "p$n" "$r" "10.210.$i.1"
    ip -n "$r" link set "p$n" master br0
  done
  # Routed packets (not the LAN's bridged ones) cross the TUN device once: table 100 sends
  # them in, what the delayer writes back is routed normally (benchmarks/wan/wan_net.sh).
  ip netns exec "$r" ip tuntap add dev d0 mode tun
  ip -n "$r" link set d0 txqueuelen 10000 up
  tc -n "$r" qdisc replace dev d0 root pfifo limit 10000
  ip netns exec "$r" sysctl -qw net.ipv4.conf.d0.rp_filter=0
  ip -n "$r" route add default dev d0 table 100
  ip -n "$r" rule add pref 100 iif d0 lookup main
  ip -n "$r" rule add pref 200 lookup 100
  local one_way jitter
  one_way=$(awk "BEGIN{print $rtt / 2}")
  jitter=$(awk "BEGIN{print $rtt / 2 * $jitter_frac}")
  setsid nsenter --net="/var/run/netns/$r" "$delay_bin" --tun=d0 --delay="${one_way}ms" \
    --jitter="${jitter}ms" --loss="$loss" --seed="$i" \
    --stats="$HOSTS_DIR/log/delay-$c.stats.json" </dev/null >"$HOSTS_DIR/log/delay-$c.log" 2>&1 &
  record_proc hosts $! "delay-$c"
  for _ in $(seq 50); do
    ip -n "$r" link show d0 | grep -q LOWER_UP && return 0
    sleep 0.1
  done
  die "cluster $c: the delayer did not attach (see $HOSTS_DIR/log/delay-$c.log)"
}

up() {
  [[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--prefix: a letter and up to 7 letters or digits"
  [[ -x $delay_bin ]] || die "--delay_bin: $delay_bin is not executable (build wan_delay)"
  local v
  for v in "$a_rate" "$a_rtt" "$b_rate" "$b_rtt"; do
    if [[ ! $v =~ ^[0-9]+$ ]] || ((v == 0)); then
      die "rates and RTTs: positive integers (got '$v')"
    fi
  done
  awk "BEGIN{exit !($loss >= 0 && $loss < 1)}" 2>/dev/null || die "--loss: in [0, 1)"
  awk "BEGIN{exit !($jitter_frac >= 0 && $jitter_frac < 1)}" 2>/dev/null ||
    die "--jitter_frac: in [0, 1)"
  if [[ -f $HOSTS_DIR/state ]]; then
    echo "hosts.sh: removing the leftovers recorded in $HOSTS_DIR/state" >&2
    teardown all
  fi
  local ns
  for ns in wan coord ra a1 a2 rb b1 b2; do
    if ip netns list | awk '{print $1}' | grep -qxF "$prefix-$ns"; then
      die "namespace $prefix-$ns exists and is not in $HOSTS_DIR/state (another fleet:" \
        "its own --dir; or choose another --prefix)"
    fi
  done
  mkdir -p "$HOSTS_DIR"
  HOSTS_DIR=$(cd "$HOSTS_DIR" && pwd)
  : >"$HOSTS_DIR/state"
  mkdir "$HOSTS_DIR/log"
  record "hosts dir $HOSTS_DIR/log"
  record "hosts config prefix=$prefix loss=$loss a=${a_rate}mbit/${a_rtt}ms b=${b_rate}mbit/${b_rtt}ms"

  local w=$prefix-wan
  new_netns "$w"
  ip netns exec "$w" sysctl -qw net.ipv4.ip_forward=1
  new_host coord 10.210.0.2 24 c0 "$w" 10.210.0.1
  ip -n "$w" addr add 10.210.0.1/24 dev c0
  new_cluster a 1 "$a_rate" "$a_rtt"
  new_cluster b 2 "$b_rate" "$b_rtt"
  echo "hosts.sh: up in $HOSTS_DIR: coord 10.210.0.2; a1 a2 on 10.210.1.0/24 (${a_rate} Mbit/s," \
    "${a_rtt} ms RTT to coord); b1 b2 on 10.210.2.0/24 (${b_rate} Mbit/s, ${b_rtt} ms); loss $loss"
}

# Bytes, packets and drops that left each end of each WAN uplink (tbf counters).
links() {
  local c r w dev ns dir
  w=$(awk '$2 == "netns" && $3 ~ /-wan$/ {print $3}' "$HOSTS_DIR/state")
  [[ -n $w ]] || die "no fleet recorded in $HOSTS_DIR/state"
  for c in a b; do
    r=${w%-wan}-r$c
    for dir in up down; do
      if [[ $dir == up ]]; then ns=$r dev=wan0; else ns=$w dev=u$c; fi
      tc -s -n "$ns" qdisc show dev "$dev" | awk -v l="$c" -v d="$dir" '
        /Sent/ {print "link " l " " d " bytes " $2 " packets " $4 " dropped " substr($7, 1, length($7) - 1); exit}'
    done
  done
}

cmd=${1:-}
[[ -n $cmd ]] || usage
shift
host="" rest=()
while (($#)); do
  case $1 in
    --dir=*) HOSTS_DIR=${1#*=} ;;
    --prefix=*) prefix=${1#*=} ;;
    --loss=*) loss=${1#*=} ;;
    --a_rate_mbit=*) a_rate=${1#*=} ;;
    --a_rtt_ms=*) a_rtt=${1#*=} ;;
    --b_rate_mbit=*) b_rate=${1#*=} ;;
    --b_rtt_ms=*) b_rtt=${1#*=} ;;
    --jitter_frac=*) jitter_frac=${1#*=} ;;
    --delay_bin=*) delay_bin=${1#*=} ;;
    --) shift; rest=("$@"); break ;;
    -*) die "unknown argument $1" ;;
    *) [[ -z $host ]] || die "unexpected argument $1"; host=$1 ;;
  esac
  shift
done

if [[ -d $HOSTS_DIR ]]; then HOSTS_DIR=$(cd "$HOSTS_DIR" && pwd); fi

case $cmd in
  check) check ;;
  up)
    ((EUID == 0)) || die "run as root"
    # shellcheck disable=SC2154  # rc is the trap's own
    trap 'rc=$?; trap - EXIT INT TERM; ((rc == 0)) || { echo "hosts.sh: up failed; removing what it made" >&2; teardown all; }; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    up
    ;;
  down)
    trap '' INT TERM  # a teardown runs to its end
    teardown all
    ;;
  exec)
    [[ -n $host && ${#rest[@]} -gt 0 ]] || die "usage: exec HOST -- CMD..."
    on_host "$host" "${rest[@]}"
    ;;
  addr | pid)
    [[ -n $host ]] || die "usage: $cmd HOST"
    field=5
    [[ $cmd == pid ]] || field=4
    v=$(host_field "$host" "$field")
    [[ -n $v ]] || die "no host '$host' in $HOSTS_DIR/state"
    echo "$v"
    ;;
  list) awk '$2 == "host" {print $3, $4, $5, $6}' "$HOSTS_DIR/state" ;;
  links) links ;;
  *) usage ;;
esac
