#!/usr/bin/env bash
# Simulated hosts for multi-host ps-lite tests: Linux network namespaces on
# one private switch.
#
#   scripts/netns.sh up N              create hosts 0..N-1 and the switch
#   scripts/netns.sh down              remove everything with the prefix
#   scripts/netns.sh exec I CMD...     run CMD in host I (exec: same pid)
#   scripts/netns.sh link I down|up    cut or restore host I's link
#   scripts/netns.sh rate I RATE       limit host I's egress with tc tbf
#                                      (RATE as tc takes it: 1gbit, 100mbit;
#                                      "off" removes the limit)
#   scripts/netns.sh netem I ARGS...   tc netem on host I's egress (delay,
#                                      loss, ...); exits 3 when the kernel
#                                      has no sch_netem, so callers can skip
#   scripts/netns.sh impair I DELAY_MS JITTER_MS LOSS_PCT
#                                      delay, jitter and loss on what host
#                                      I sends, without netem, through our
#                                      NFQUEUE program (see below); "impair
#                                      I off" removes it; exits 3 when it is
#                                      unavailable here, as netem does
#   scripts/netns.sh addr I            print host I's address
#   scripts/netns.sh check             exit 0 when namespaces, veth pairs
#                                      and bridges can be created here, else
#                                      say why and exit 4
#
# Layout. Host I is the namespace PREFIX-hI, with lo up and one interface,
# PSNS_IFACE (default eth0), addressed NET.(I+1)/24 where NET is PSNS_NET
# (default 10.213.47): host 0 is 10.213.47.1. Its peer, hI, sits in the
# namespace PREFIX-sw as a port of the bridge br0 (STP off). Every interface
# is created directly inside its namespace, so the root namespace gets no
# interface, address or route into the /24: the hosts reach each other and
# their own loopback, nothing else. Interface names are short and fixed
# (eth0, hI, br0) and unique within their namespace, so they stay far below
# the kernel's 15 characters whatever the prefix.
#
# Environment:
#   PSNS_PREFIX      namespace name prefix (default psns; letters, digits,
#                    '_' and '-', at most 32). Runs with different prefixes
#                    never collide: each has its own namespaces and switch,
#                    and all may use the same /24.
#   PSNS_NET         first three octets of the /24 (default 10.213.47)
#   PSNS_IFACE       host-side interface name (default eth0); give it to the
#                    nodes as DMLC_INTERFACE
#   PSNS_LINK_MODE   how "link I down" cuts (default port, see below)
#   PSNS_IMPAIR_SEED seed for "impair" (a whole number; default random)
#   PSNS_DECOY       1: "up" gives every host, before its job interface, a
#                    decoy interface d0 (one end of a veth pair inside the
#                    host) addressed 198.18.I.1/24, that leads nowhere: the
#                    host's first interface is then not on the job network
#
# Cutting a link. "link I down" by default disables host I's port on the
# bridge (bridge port state "disabled", as a switch port shut by an
# administrator or a cable cut between two switches): both veth ends keep
# their carrier, the host sees no link change, and frames to and from it are
# dropped in the switch. Neither end's kernel learns anything, so TCP
# connections simply retransmit and carry on once "link I up" re-enables the
# port (after the retransmission timer fires again, which after a cut of a
# few seconds can take as long again). With PSNS_LINK_MODE=carrier the
# switch-side veth end is set down instead: the host side then shows
# NO-CARRIER (veth propagates carrier), like a pulled cable. Linux keeps the
# address, the routes and the sockets on a carrier loss too, so TCP survives
# that as well; it is there to see whether anything reacts to the carrier.
# Either way "link I up" restores the link; a link left down stays down
# until "down".
#
# Impairing without netem. Kernels built without sch_netem (tc says
# "unknown qdisc") still have NFQUEUE, so "impair I DELAY_MS JITTER_MS
# LOSS_PCT" runs tools/netimpair (a small C program of ours, on
# libnetfilter_queue) in every other host J on queue I and adds in J
#   iptables -t raw -A PREROUTING -i IFACE -s <host I> -j NFQUEUE \
#            --queue-num I --queue-bypass
# Every IPv4 packet host I sends is then dropped with probability
# LOSS_PCT/100, and the rest arrive DELAY_MS plus a uniform offset in
# [-JITTER_MS, +JITTER_MS) later (never earlier than at once; jitter can
# reorder, as netem's does). Decimals are fine (0.5). Only what host I
# sends is touched: impair both ends for a symmetric path. The packets are
# held on arrival, not in host I's OUTPUT chain: there TCP Small Queues
# would count them against host I's sockets and a bulk transfer with 5 ms
# would crawl at 1-20 MB/s (tools/netimpair/netimpair.c says more). For
# the same reason ping leaves the delay out of its RTT unless given -U. It
# works beside "rate", which shapes host I's egress in its qdisc. A second
# "impair I ..." replaces the first; "impair I off" deletes the rules, stops
# the programs (they accept what they still hold) and prints their
# summaries (packets seen, dropped, accepted, ENOBUFS). The programs run in
# the background; pids and logs are in /run/psns-PREFIX/
# (hJ-from-hI.netimpair.pid, .log), which "down" removes with the rest. The
# binary is build/netimpair under the repository root, built with cc when
# missing or older than its source (or by make netimpair); without cc,
# iptables, libnetfilter_queue's headers or the kernel's NFQUEUE support it
# says which and exits 3. PSNS_IMPAIR_SEED fixes the draws (host J uses
# SEED+J; default: clock and pid). Every held packet crosses to user space
# and back, which costs CPU: fine for tests, not for measuring peak
# throughput. Hosts are those that exist when "impair" runs.
#
# "up N" first removes any namespaces left with the same prefix; if it fails
# half way it removes what it made. "down" is idempotent: it kills every
# process still inside the prefix's namespaces (SIGKILL, by pid, from
# "ip netns pids") and deletes the namespaces, which deletes their veth pairs
# and the bridge. It also cleans up after a run that crashed, as long as the
# prefix is the same.
#
# Needs: root (or CAP_SYS_ADMIN and CAP_NET_ADMIN in the root namespaces),
# iproute2's ip, bridge (for link) and tc (for rate and netem), veth and bridge
# support in the kernel. sch_tbf for rate, sch_netem for netem; for impair,
# iptables, cc, libnetfilter_queue (libnetfilter-queue-dev) and the kernel's
# NFQUEUE target and nfnetlink_queue.
#
# Running ps-lite across the hosts: the scheduler runs in host 0, every node
# gets DMLC_PS_ROOT_URI=<host 0's address> and DMLC_INTERFACE=eth0, e.g.
#
#   scripts/netns.sh up 3
#   export DMLC_PS_ROOT_URI=10.213.47.1 DMLC_PS_ROOT_PORT=9000 \
#          DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_INTERFACE=eth0
#   DMLC_ROLE=scheduler scripts/netns.sh exec 0 build/test_kv_app &
#   DMLC_ROLE=server    scripts/netns.sh exec 1 build/test_kv_app &
#   DMLC_ROLE=worker    scripts/netns.sh exec 2 build/test_kv_app
#   wait; scripts/netns.sh down
#
# The Go tests in tests/netns_test.go do this with a per-test prefix:
#   sudo go test -count=1 -run Netns -v ./tests/
#
# Exit status: 0 ok, 1 failure, 2 usage, 3 netem or impair unavailable, 4
# not usable here (not root, no ip, no namespace support).
set -euo pipefail

prog=${0##*/}
prefix=${PSNS_PREFIX:-psns}
net=${PSNS_NET:-10.213.47}
iface=${PSNS_IFACE:-eth0}
link_mode=${PSNS_LINK_MODE:-port}
sw=$prefix-sw
max_hosts=200
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run_dir=/run/psns-$prefix # impair's pid files and logs
[ -d /run ] || run_dir=/tmp/psns-$prefix

say() { echo "$prog: $*" >&2; }
die() {
  say "$*"
  exit 1
}
usage() {
  sed -n '5,24s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

# Cheap checks first, so that a user without the means gets one clear line.
need_tools() {
  if [ "$(id -u)" -ne 0 ]; then
    say "needs root (network namespaces, veth pairs and a bridge); run it with sudo"
    exit 4
  fi
  if ! command -v ip >/dev/null 2>&1; then
    say "needs ip from iproute2 (apt-get install iproute2)"
    exit 4
  fi
}

check_prefix() {
  [[ $prefix =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$ ]] ||
    die "PSNS_PREFIX=$prefix: use 1-32 letters, digits, '_' or '-'"
  [[ $net =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] ||
    die "PSNS_NET=$net: give the first three octets, e.g. 10.213.47"
  [[ $iface =~ ^[A-Za-z0-9_-]{1,15}$ ]] ||
    die "PSNS_IFACE=$iface: at most 15 letters, digits, '_' or '-'"
}

host_ns() { echo "$prefix-h$1"; }

# The namespaces of this prefix, exactly: PREFIX-sw and PREFIX-h<digits>
# (not those of a longer prefix such as PREFIX-x-h0).
our_namespaces() {
  local ns
  ip netns list 2>/dev/null | while read -r ns _; do
    if [ "$ns" = "$sw" ] || [[ $ns =~ ^"$prefix"-h[0-9]+$ ]]; then
      echo "$ns"
    fi
  done
}

# host_index I fails unless host I exists.
host_index() {
  [[ $1 =~ ^[0-9]+$ ]] || die "host index '$1' is not a number"
  ip netns list | grep -q "^$(host_ns "$1")\( \|$\)" ||
    die "host $1 does not exist (namespace $(host_ns "$1")); run '$prog up N' first"
}

cmd_down() {
  local ns pid pids
  for ns in $(our_namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    for pid in $pids; do
      kill -KILL "$pid" 2>/dev/null || true
    done
  done
  for ns in $(our_namespaces); do
    ip netns del "$ns" 2>/dev/null || say "could not delete namespace $ns"
  done
  # impair's pid files and logs (its rules went with the namespaces).
  rm -rf "$run_dir"
  if [ -n "$(our_namespaces)" ]; then
    die "namespaces left: $(our_namespaces | tr '\n' ' ')"
  fi
}

cmd_up() {
  local n=$1 i ns
  if ! [[ $n =~ ^[0-9]+$ ]] || ((10#$n < 1 || 10#$n > max_hosts)); then
    die "up: N must be 1..$max_hosts, not '$n'"
  fi
  n=$((10#$n))
  cmd_down
  trap 'say "up failed; removing what it made"; cmd_down' ERR
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge stp_state 0 forward_delay 0
  ip -n "$sw" link set br0 up
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    if [ "${PSNS_DECOY:-0}" = 1 ]; then
      # Created first, so it comes before the job interface in the host's
      # interface list; both ends stay in the host, so it reaches nothing.
      ip -n "$ns" link add d0 type veth peer name d1
      ip -n "$ns" addr add "198.18.$((i % 256)).1/24" dev d0
      ip -n "$ns" link set d1 up
      ip -n "$ns" link set d0 up
    fi
    # Both ends are created inside their namespaces: nothing appears in
    # the root namespace, even for a moment.
    ip link add "$iface" netns "$ns" type veth peer name "h$i" netns "$sw"
    ip -n "$sw" link set "h$i" master br0
    ip -n "$sw" link set "h$i" up
    ip -n "$ns" addr add "$net.$((i + 1))/24" dev "$iface"
    ip -n "$ns" link set "$iface" up
  done
  trap - ERR
  # Wait (bounded) until every host's link is up (veth carrier and an
  # STP-less bridge port are up at once; this only guards against a slow
  # kernel), so that the first connection does not race it.
  local tries
  for ((i = 0; i < n; i++)); do
    ns=$(host_ns "$i")
    tries=0
    until ip -n "$ns" link show dev "$iface" | grep -q 'state UP'; do
      tries=$((tries + 1))
      ((tries < 50)) || die "host $i: $iface did not come up"
      sleep 0.1
    done
  done
}

cmd_link() {
  local i=$1 dir=${2:-}
  host_index "$i"
  case $dir in
  up | down) ;;
  *) die "link: say 'down' or 'up', not '$dir'" ;;
  esac
  command -v bridge >/dev/null 2>&1 || die "needs bridge from iproute2"
  # Port states: disabled (0) drops every frame at the port, forwarding (3)
  # passes them; with STP off the bridge leaves a state as set. (Through
  # "ip link set ... type bridge_slave state N" iproute2 6.1 exits 0 and
  # changes nothing, hence bridge(8) and the check that follows.)
  if [ "$dir" = up ]; then
    # Undo either kind of cut, whichever mode made it.
    ip -n "$sw" link set dev "h$i" up
    bridge -n "$sw" link set dev "h$i" state 3
    port_state "$i" forwarding
    return
  fi
  case $link_mode in
  port) bridge -n "$sw" link set dev "h$i" state 0 ;;
  carrier) ip -n "$sw" link set dev "h$i" down ;;
  *) die "PSNS_LINK_MODE=$link_mode: use port or carrier" ;;
  esac
  port_state "$i" disabled
}

# port_state I STATE fails unless host I's switch port reaches STATE
# (disabled, forwarding) within a second.
port_state() {
  local tries=0
  until bridge -n "$sw" link show dev "h$1" 2>/dev/null | grep -q "state $2 "; do
    tries=$((tries + 1))
    ((tries < 20)) || die "host $1's switch port is not $2: $(bridge -n "$sw" link show dev "h$1" 2>&1)"
    sleep 0.05
  done
}

have_tc() { command -v tc >/dev/null 2>&1 || die "needs tc from iproute2"; }

cmd_rate() {
  local i=$1 rate=${2:-}
  host_index "$i"
  have_tc
  [ -n "$rate" ] || die "rate: give a rate such as 1gbit, or off"
  local ns
  ns=$(host_ns "$i")
  ip netns exec "$ns" tc qdisc del dev "$iface" root 2>/dev/null || true
  [ "$rate" = off ] && return 0
  # burst: at least rate/HZ; 1 MB covers 1gbit at HZ 100. latency bounds
  # the queue.
  ip netns exec "$ns" tc qdisc add dev "$iface" root tbf rate "$rate" burst 1mb latency 100ms
}

cmd_netem() {
  local i=$1
  shift
  host_index "$i"
  have_tc
  local ns out
  ns=$(host_ns "$i")
  ip netns exec "$ns" tc qdisc del dev "$iface" root 2>/dev/null || true
  if ! out=$(ip netns exec "$ns" tc qdisc add dev "$iface" root netem "$@" 2>&1); then
    if [[ $out == *"unknown"* ]] || [[ $out == *"not supported"* ]] ||
      [[ $out == *"No such file"* ]]; then
      say "this kernel has no sch_netem (tc said: $out); netem faults are unavailable"
      exit 3
    fi
    die "tc qdisc add netem $*: $out"
  fi
}

# netimpair_build sets netimpair to the path of the binary, building it
# first when it is missing or older than its source; exits 3 when it cannot.
netimpair_build() {
  local src=$repo/tools/netimpair/netimpair.c flags out tmp
  netimpair=$repo/build/netimpair
  if [ -x "$netimpair" ] && ! [ "$src" -nt "$netimpair" ]; then
    return 0
  fi
  if ! [ -r "$src" ]; then
    say "no $src to build netimpair from; impair is unavailable"
    exit 3
  fi
  if ! command -v cc >/dev/null 2>&1; then
    say "needs cc to build $src (apt-get install gcc); impair is unavailable"
    exit 3
  fi
  if ! flags=$(pkg-config --cflags --libs libnetfilter_queue 2>/dev/null); then
    flags="-lnetfilter_queue -lnfnetlink"
  fi
  if ! [ -r /usr/include/libnetfilter_queue/libnetfilter_queue.h ] &&
    ! pkg-config --exists libnetfilter_queue 2>/dev/null; then
    say "needs libnetfilter_queue's headers (apt-get install libnetfilter-queue-dev); impair is unavailable"
    exit 3
  fi
  mkdir -p "$repo/build"
  # Built aside and renamed, so that concurrent runs never see half a file.
  tmp=$(mktemp "$repo/build/.netimpair.XXXXXX")
  # shellcheck disable=SC2086 # flags is a list of words
  if ! out=$(cc -O2 -Wall -Wextra -o "$tmp" "$src" $flags 2>&1); then
    rm -f "$tmp"
    say "could not build $src; impair is unavailable: $out"
    exit 3
  fi
  chmod 755 "$tmp"
  mv -f "$tmp" "$netimpair"
}

# alive PID: PID exists and is not a zombie.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# The indices of the hosts that exist, one a line.
host_indices() {
  our_namespaces | sed -n "s/^$prefix-h\([0-9][0-9]*\)\$/\1/p" | sort -n
}

# impair_rule J I OP: add (-A) or delete (-D) the rule in host J that queues
# what host I sends to J's netimpair on queue I.
impair_rule() {
  ip netns exec "$(host_ns "$1")" iptables -t raw "$3" PREROUTING -i "$iface" \
    -s "$net.$(($2 + 1))" -j NFQUEUE --queue-num "$2" --queue-bypass
}

# impair_stop I removes the rules that queue host I's packets in the other
# hosts and stops the netimpair behind each (the recorded one and any stray
# on queue I), printing each one's summary.
impair_stop() {
  local i=$1 j ns pid tries n base
  for j in $(host_indices); do
    [ "$j" != "$i" ] || continue
    ns=$(host_ns "$j")
    base=$run_dir/h$j-from-h$i.netimpair
    # The rule first, so that nothing new is queued; with --queue-bypass
    # nothing would be lost without a program either.
    if command -v iptables >/dev/null 2>&1; then
      n=0
      while ((n < 100)) && impair_rule "$j" "$i" -D 2>/dev/null; do
        n=$((n + 1))
      done
    fi
    for pid in $(cat "$base.pid" 2>/dev/null) $(ip netns pids "$ns" 2>/dev/null); do
      [[ $pid =~ ^[0-9]+$ ]] || continue
      [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = netimpair ] || continue
      [[ " $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *" -q $i "* ]] || continue
      [ "$(ip netns identify "$pid" 2>/dev/null)" = "$ns" ] || continue
      kill -TERM "$pid" 2>/dev/null || continue
      tries=0
      while alive "$pid"; do
        tries=$((tries + 1))
        if ((tries > 40)); then
          kill -KILL "$pid" 2>/dev/null || true
          break
        fi
        sleep 0.05
      done
    done
    rm -f "$base.pid"
    if [ -s "$base.log" ]; then
      grep ' seen ' "$base.log" | tail -n 1 |
        sed "s/^netimpair: queue [0-9]*: /$prog: host $i's packets at host $j: /" >&2 || true
    fi
    rm -f "$base.log"
  done
}

# impair_start J I DELAY JITTER LOSS: netimpair in host J on queue I, then
# the rule that feeds it what host I sends.
impair_start() {
  local j=$1 i=$2 ns pid rc tries out base seed=()
  ns=$(host_ns "$j")
  base=$run_dir/h$j-from-h$i.netimpair
  if [ -n "${PSNS_IMPAIR_SEED:-}" ]; then
    # One seed per receiving host, so that their draws differ.
    seed=(-s "$((PSNS_IMPAIR_SEED + j))")
  fi
  # ip netns exec execs the program: $! is its pid. Its descriptors are
  # all redirected, so that it holds no pipe of the caller open.
  ip netns exec "$ns" "$netimpair" -q "$i" -d "$3" -j "$4" -l "$5" \
    "${seed[@]}" </dev/null >"$base.log" 2>&1 &
  pid=$!
  echo "$pid" >"$base.pid"
  tries=0
  until grep -q ': ready:' "$base.log" 2>/dev/null; do
    if ! alive "$pid"; then
      rc=0
      wait "$pid" || rc=$?
      out=$(cat "$base.log")
      impair_stop "$i"
      if [ "$rc" -eq 3 ]; then
        say "netimpair cannot bind an NFQUEUE in $ns; impair is unavailable: $out"
        exit 3
      fi
      die "netimpair in $ns exited with status $rc: $out"
    fi
    tries=$((tries + 1))
    if ((tries > 100)); then
      impair_stop "$i"
      die "netimpair in $ns did not start in 5 s"
    fi
    sleep 0.05
  done
  if ! out=$(impair_rule "$j" "$i" -A 2>&1); then
    impair_stop "$i"
    say "iptables cannot add an NFQUEUE rule in $ns; impair is unavailable: $out"
    exit 3
  fi
}

cmd_impair() {
  local i=$1 delay=$2 jitter=${3:-} loss=${4:-} j
  host_index "$i"
  if [ "$delay" = off ]; then
    impair_stop "$i"
    return 0
  fi
  local num='^[0-9]+(\.[0-9]+)?$'
  [[ $delay =~ $num ]] || die "impair: DELAY_MS '$delay' is not a number of ms"
  [[ $jitter =~ $num ]] || die "impair: JITTER_MS '$jitter' is not a number of ms"
  if ! [[ $loss =~ $num ]] || ! [[ $loss =~ ^0*(100(\.0*)?|[0-9]{1,2}(\..*)?)$ ]]; then
    die "impair: LOSS_PCT '$loss' is not a percentage (0 to 100)"
  fi
  [[ ${PSNS_IMPAIR_SEED:-0} =~ ^[0-9]{1,18}$ ]] ||
    die "PSNS_IMPAIR_SEED=$PSNS_IMPAIR_SEED: give a whole number"
  if ! command -v iptables >/dev/null 2>&1; then
    say "needs iptables (apt-get install iptables); impair is unavailable"
    exit 3
  fi
  netimpair_build
  impair_stop "$i"
  [ -d "$run_dir" ] || mkdir -m 700 "$run_dir"
  for j in $(host_indices); do
    [ "$j" != "$i" ] || continue
    impair_start "$j" "$i" "$delay" "$jitter" "$loss"
  done
}

cmd_check() {
  local probe=$prefix-probe
  ip netns del "$probe" 2>/dev/null || true
  local out
  if ! out=$({
    ip netns add "$probe" &&
      ip -n "$probe" link add br0 type bridge &&
      ip -n "$probe" link add v0 type veth peer name v1 &&
      ip -n "$probe" link set lo up
  } 2>&1); then
    ip netns del "$probe" 2>/dev/null || true
    say "network namespaces are not usable here: ${out:-unknown error}"
    exit 4
  fi
  ip netns del "$probe"
}

[ $# -ge 1 ] || usage
need_tools
check_prefix
case $1 in
up)
  [ $# -eq 2 ] || usage
  cmd_up "$2"
  ;;
down)
  [ $# -eq 1 ] || usage
  cmd_down
  ;;
exec)
  [ $# -ge 3 ] || usage
  host_index "$2"
  ns=$(host_ns "$2")
  shift 2
  # ip netns exec execs CMD itself: the caller's pid is CMD's pid, so
  # signals (SIGSTOP, SIGKILL) reach it directly.
  exec ip netns exec "$ns" "$@"
  ;;
link)
  [ $# -eq 3 ] || usage
  cmd_link "$2" "$3"
  ;;
rate)
  [ $# -eq 3 ] || usage
  cmd_rate "$2" "$3"
  ;;
netem)
  [ $# -ge 3 ] || usage
  i=$2
  shift 2
  cmd_netem "$i" "$@"
  ;;
impair)
  if [ $# -eq 3 ] && [ "$3" = off ]; then
    cmd_impair "$2" off
  else
    [ $# -eq 5 ] || usage
    cmd_impair "$2" "$3" "$4" "$5"
  fi
  ;;
addr)
  [ $# -eq 2 ] || usage
  host_index "$2"
  echo "$net.$(($2 + 1))"
  ;;
check)
  [ $# -eq 1 ] || usage
  cmd_check
  ;;
*) usage ;;
esac
