#!/usr/bin/env bash
# WAN emulation with real links (docs/wan.md): network namespaces for one shard site and one site
# per worker, joined through a "wan" namespace by veth pairs whose egress is rate-limited by tbf
# in both directions (each worker site has its own access link, as on a real WAN), and a
# user-space packet delayer (diloco-wan-delay, a TUN device) that every forwarded packet crosses
# once: one-way delay RTT/2 with jitter and loss. The kernel has no netem; this is its stand-in.
#
#   <P>-s   shards   10.201.0.2  --veth--  10.201.0.1  <P>-x (forwarding, TUN delay)
#   <P>-wI  worker I 10.201.I+1.2 -veth--  10.201.I+1.1
#
# Worker I's upload is limited on its own veth's egress, its download on the wan side's egress
# (the bottleneck router: a queue of one bandwidth-delay product). The shard site's link is not
# limited unless --shard_rate_mbit (a data centre's uplink, far above one worker's).
#
# Usage:
#   wan_net.sh check                 exit 0 if root, netns, veth, tbf and TUN all work here;
#                                    else print "skipped: why" and exit 77
#   wan_net.sh up --prefix=P --workers=N --rate_mbit=R --rtt_ms=T --delay_bin=PATH
#                 [--jitter_ms=J] [--loss=L] [--shard_rate_mbit=R] [--mtu=1500]
#                 [--tcp_buffers=kernel|bdp] [--seed=N]
#   wan_net.sh down --prefix=P       stops the delayer and deletes the namespaces (idempotent)
# State (delayer PID, its log and stats) lives in /tmp/wan-net.P/. Processes started inside the
# namespaces are the caller's to stop. --tcp_buffers=bdp raises the hosts' TCP buffer ceilings
# (tcp_rmem/tcp_wmem max) to 4 x the bandwidth-delay product; kernel keeps a fresh namespace's
# (wmem max 4 MiB: one connection carries at most ~4 MiB per RTT, 670 Mbit/s at 50 ms).
set -euo pipefail

die() { echo "wan_net.sh: $*" >&2; exit 1; }

check() {
  [[ $(id -u) -eq 0 ]] || { echo "skipped: not root (network namespaces need it)"; exit 77; }
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    echo "skipped: ip or tc (iproute2) missing"
    exit 77
  fi
  local p=wanchk$$
  # shellcheck disable=SC2064
  trap "ip netns del ${p}a 2>/dev/null || true; ip netns del ${p}b 2>/dev/null || true" EXIT
  if ! ip netns add ${p}a 2>/dev/null || ! ip netns add ${p}b 2>/dev/null; then
    echo "skipped: cannot create network namespaces"
    exit 77
  fi
  ip link add name v netns ${p}a type veth peer name v netns ${p}b 2>/dev/null ||
    { echo "skipped: no veth support"; exit 77; }
  tc -n ${p}a qdisc add dev v root tbf rate 10mbit burst 16kb limit 64kb 2>/dev/null ||
    { echo "skipped: no tbf qdisc"; exit 77; }
  ip netns exec ${p}a ip tuntap add dev t mode tun 2>/dev/null ||
    { echo "skipped: no TUN device (/dev/net/tun)"; exit 77; }
  exit 0
}

down() {
  local p=$1 state=/tmp/wan-net.$1
  if [[ -s $state/delay.pid ]]; then
    local pid
    pid=$(cat "$state/delay.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$state/delay.pid"
  fi
  # Exactly this run's namespaces: <P>-s, <P>-x and <P>-w<digits>.
  ip netns list | awk '{print $1}' | grep -E "^${p}-(s|x|w[0-9]+)$" |
    while read -r ns; do ip netns del "$ns" || true; done
}

up() {
  local p="" workers=0 rate=0 rtt=0 jitter=0 loss=0 shard_rate=0 mtu=1500 bufs=kernel seed=1
  local delay_bin=""
  for a in "$@"; do
    case $a in
      --prefix=*) p=${a#*=} ;;
      --workers=*) workers=${a#*=} ;;
      --rate_mbit=*) rate=${a#*=} ;;
      --rtt_ms=*) rtt=${a#*=} ;;
      --jitter_ms=*) jitter=${a#*=} ;;
      --loss=*) loss=${a#*=} ;;
      --shard_rate_mbit=*) shard_rate=${a#*=} ;;
      --mtu=*) mtu=${a#*=} ;;
      --tcp_buffers=*) bufs=${a#*=} ;;
      --seed=*) seed=${a#*=} ;;
      --delay_bin=*) delay_bin=${a#*=} ;;
      *) die "unknown argument $a" ;;
    esac
  done
  [[ $p =~ ^[a-z0-9]{1,10}$ ]] || die "--prefix: 1-10 lower-case letters or digits"
  ((workers >= 1 && workers <= 200)) || die "--workers: 1..200"
  ((rate > 0 && rtt >= 0)) || die "--rate_mbit > 0 and --rtt_ms >= 0 needed"
  [[ -x $delay_bin ]] || die "--delay_bin: $delay_bin is not executable"
  [[ $bufs == kernel || $bufs == bdp ]] || die "--tcp_buffers: kernel or bdp"
  local state=/tmp/wan-net.$p
  mkdir -p "$state"
  local x=$p-x
  ip netns add "$x"
  ip -n "$x" link set lo up
  ip netns exec "$x" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
    net.ipv4.conf.default.rp_filter=0

  # One access link: veth pair <ns>:v0 <-> x:<xdev>, tbf on both egresses at `r` Mbit/s.
  link() {
    local ns=$1 xdev=$2 net=$3 r=$4
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add name v0 netns "$ns" mtu "$mtu" type veth peer name "$xdev" netns "$x" mtu "$mtu"
    ip -n "$ns" addr add "10.201.$net.2/24" dev v0
    ip -n "$x" addr add "10.201.$net.1/24" dev "$xdev"
    ip -n "$ns" link set v0 up
    ip -n "$x" link set "$xdev" up
    ip -n "$ns" route add default via "10.201.$net.1"
    if ((r > 0)); then
      # burst: 1 ms at the rate (at least 4 packets); queue: one bandwidth-delay product, a
      # router's classic buffer, but at least 256 KiB: the sender's own tbf queues its TCP's
      # 64 KiB segmentation-offload packets, and a queue of one such packet drops the next.
      local burst=$((r * 125)) limit=$((r * 125 * rtt))
      ((burst >= 4 * mtu)) || burst=$((4 * mtu))
      ((limit >= 262144)) || limit=262144
      tc -n "$ns" qdisc add dev v0 root tbf rate "${r}mbit" burst "$burst" limit "$limit"
      tc -n "$x" qdisc add dev "$xdev" root tbf rate "${r}mbit" burst "$burst" limit "$limit"
    fi
    if [[ $bufs == bdp ]]; then
      local b=$((r * 125 * rtt * 4))
      ((b >= 4194304)) || b=4194304
      ip netns exec "$ns" sysctl -qw "net.ipv4.tcp_rmem=4096 131072 $b" \
        "net.ipv4.tcp_wmem=4096 16384 $b"
    fi
  }
  link "$p-s" s0 0 "$shard_rate"
  for ((i = 0; i < workers; i++)); do link "$p-w$i" "w$i" $((i + 1)) "$rate"; done

  # Every packet forwarded in x goes into the TUN device once (table 100), and what comes back
  # out of it is routed normally (main table) to its destination link.
  ip netns exec "$x" ip tuntap add dev d0 mode tun
  ip -n "$x" link set d0 mtu "$mtu" txqueuelen 10000 up
  # A plain FIFO into the delayer: what waits there waits for the delayer's read, not for a
  # link, so no AQM drops of its own.
  tc -n "$x" qdisc replace dev d0 root pfifo limit 10000
  ip netns exec "$x" sysctl -qw net.ipv4.conf.d0.rp_filter=0
  ip -n "$x" route add default dev d0 table 100
  ip -n "$x" rule add pref 100 iif d0 lookup main
  ip -n "$x" rule add pref 200 lookup 100
  ip netns exec "$x" "$delay_bin" --tun=d0 --delay="$(awk "BEGIN{print $rtt/2}")ms" \
    --jitter="${jitter}ms" --loss="$loss" --seed="$seed" --stats="$state/delay.stats.json" \
    >"$state/delay.log" 2>&1 &
  echo $! >"$state/delay.pid"
  # Up once the delayer holds the device (the TUN carrier comes up when it attaches).
  for _ in $(seq 50); do
    ip -n "$x" link show d0 | grep -q LOWER_UP && return 0
    sleep 0.1
  done
  die "the delayer did not attach to d0 (see $state/delay.log)"
}

cmd=${1:-}
shift || true
case $cmd in
  check) check ;;
  up)
    # A failed setup leaves nothing behind.
    prefix=$(printf '%s\n' "$@" | sed -n 's/^--prefix=//p')
    trap '[[ $? -eq 0 ]] || down "$prefix"' EXIT
    up "$@"
    ;;
  down)
    [[ ${1:-} == --prefix=* ]] || die "down --prefix=P"
    down "${1#*=}"
    ;;
  *) die "usage: wan_net.sh check | up --prefix=P ... | down --prefix=P" ;;
esac
