# shellcheck shell=bash
# Shared part of local.sh and local_multi_workers.sh; sourced, not run.
#
# It starts the processes of a ps-lite job on this machine and supervises
# them:
#
#   launch_job MODE NUM_SERVERS NUM_WORKERS BIN [ARGS...]
#
# MODE "single" starts one scheduler, NUM_SERVERS servers and NUM_WORKERS
# workers, each a process "BIN ARGS...". MODE "multi" appends the role
# (scheduler, server, worker) to each process's arguments and starts a single
# worker process, which hosts all the workers itself.
#
# Each process gets DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_PS_ROOT_URI
# (127.0.0.1), DMLC_PS_ROOT_PORT and its DMLC_ROLE; the rest of the
# environment (PS_VERBOSE, PS_RESEND, DMLC_LOCAL, ...) passes through.
#
# Settings, all from the environment:
#   DMLC_PS_ROOT_PORT  scheduler port; default: a free port below the
#                      kernel's ephemeral range (else in 20000-60000; 8000
#                      if none is found)
#   PS_LOCAL_TIMEOUT   seconds before a job that is still running is killed
#                      (default 120; 0 means no limit)
#   PS_LOCAL_GRACE     seconds between SIGTERM and SIGKILL when stopping the
#                      processes (default 3)
#   GOMAXPROCS         passed on when set; otherwise each process gets the
#                      cores this script may use (its CPU affinity and
#                      cgroup quota) divided by the servers and worker
#                      processes of the job (at least 1): Go runtimes that
#                      each take every core spin idle threads that take
#                      CPU from the job's other processes
#   PS_METRICS_PORT    when set, process i (in start order: the scheduler 0,
#                      then the servers, then the workers) serves its
#                      metrics at 127.0.0.1:(PS_METRICS_PORT+i), given to it
#                      as PS_METRICS_ADDR; the port of each is printed
#
# launch_job returns 0 when every process exits 0. When one fails (non-zero
# status, or killed by a signal), it names the process and its status, stops
# the others and returns that status; on timeout it names the processes still
# running, stops them and returns 124. SIGINT, SIGTERM or SIGHUP stops every
# process and exits (130, 143, 129).
#
# Each process runs in its own process group, and stopping a process signals
# its whole group, so helpers it started (a wrapper script's child, say) go
# too and no orphan is left behind.
#
# Needs bash 5.1 or later (wait -n -p).

_launch_prog=${0##*/}
_launch_pids=()  # one per process; each is also its process group id
_launch_names=() # "scheduler", "server 0", ...
_launch_done=()  # set once the process has been reaped
_launch_tick=    # pid of the current polling sleep

_launch_say() { echo "$_launch_prog: $*" >&2; }

# _launch_to_us SECONDS sets _launch_us to SECONDS (e.g. "2" or "0.5") in
# microseconds.
_launch_to_us() {
  local int=${1%%.*} frac=
  [[ $1 == *.* ]] && frac=${1#*.}
  frac=${frac}000000
  _launch_us=$((10#$int * 1000000 + 10#${frac:0:6}))
}

# _launch_cores [CPU_MAX] sets _launch_ncores to the CPUs this shell may run
# on (its affinity), or fewer when the cgroup's CPU quota (CPU_MAX, default
# /sys/fs/cgroup/cpu.max: "200000 100000" is 2 cores) allows fewer, as Go's
# own default GOMAXPROCS does.
_launch_cores() {
  local quota period
  _launch_ncores=$(nproc 2>/dev/null || echo 1)
  if read -r quota period 2>/dev/null <"${1:-/sys/fs/cgroup/cpu.max}" &&
    [[ $quota =~ ^[0-9]+$ && $period =~ ^[1-9][0-9]*$ ]]; then
    quota=$(((quota + period - 1) / period))
    if ((quota < _launch_ncores)); then _launch_ncores=$quota; fi
  fi
}

# _launch_now sets _launch_us to the current time in microseconds.
_launch_now() { _launch_us=${EPOCHREALTIME/[.,]/}; }

# _launch_free_port prints a TCP port nobody listens on, or 8000. It picks
# below the kernel's ephemeral range (ip_local_port_range) when there is
# room, so that no node, whose port the kernel picks from that range, can
# take it between this check and the scheduler's bind.
_launch_free_port() {
  local i p lo=20000 span=40001 eph
  eph=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
  if [[ $eph =~ ^[0-9]+$ ]] && ((eph > 12000)); then
    lo=10000 span=$((eph - 10000))
  fi
  for ((i = 0; i < 100; i++)); do
    p=$(((RANDOM << 15 | RANDOM) % span + lo))
    # A DMLC_LOCAL job names its ipc socket after the port.
    [ -e "/tmp/$p" ] && continue
    if command -v ss >/dev/null 2>&1 &&
      [ -n "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then
      continue
    fi
    # Something answers on the port: in use.
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    echo "$p"
    return
  done
  echo 8000
}

# _launch_start NAME ROLE [EXTRA ARGS...] starts one process in a process
# group of its own (job control is on for the fork only), stdin /dev/null.
_launch_start() {
  local name=$1 role=$2
  shift 2
  set -m
  if [ -n "${PS_METRICS_PORT:-}" ]; then
    local maddr=127.0.0.1:$((PS_METRICS_PORT + ${#_launch_pids[@]}))
    echo "$_launch_prog: $name serves metrics at http://$maddr/metrics" >&2
    PS_METRICS_ADDR=$maddr DMLC_ROLE=$role "$_launch_bin" "${_launch_args[@]}" "$@" </dev/null &
  else
    DMLC_ROLE=$role "$_launch_bin" "${_launch_args[@]}" "$@" </dev/null &
  fi
  _launch_pids+=($!)
  set +m
  _launch_names+=("$name")
}

# _launch_signal SIG sends SIG to the process group of every process, also
# those already reaped, for what they may have left behind.
_launch_signal() {
  local pid
  for pid in "${_launch_pids[@]}"; do
    kill "-$1" -- "-$pid" 2>/dev/null
  done
}

# _launch_next [DEADLINE_US] waits until a process exits or DEADLINE_US (an
# EPOCHREALTIME in microseconds) passes. It sets _launch_idx to the index of
# the process that exited, -1 at the deadline, or -2 when every process has
# exited; and _launch_rc to the exit status.
#
# wait -n alone is not enough: bash drops a background job killed by a
# signal from its job table once it has reaped it, after which wait -n no
# longer knows it (plain "wait PID" still returns its status). So the loop
# looks for processes that are gone with kill -0 first, and blocks in wait -n
# for at most half a second at a time, with a sleep as a ticker.
_launch_next() {
  local deadline=${1:-} i pid rc live
  while :; do
    live=()
    for i in "${!_launch_pids[@]}"; do
      [ -n "${_launch_done[i]:-}" ] && continue
      pid=${_launch_pids[i]}
      if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null
        _launch_rc=$?
        _launch_done[i]=1
        _launch_idx=$i
        return 0
      fi
      live+=("$pid")
    done
    if [ ${#live[@]} -eq 0 ]; then
      _launch_idx=-2
      return 0
    fi
    _launch_now
    if [ -n "$deadline" ] && [ "$_launch_us" -ge "$deadline" ]; then
      _launch_idx=-1
      return 0
    fi
    if [ -n "$_launch_tick" ] && ! kill -0 "$_launch_tick" 2>/dev/null; then
      wait "$_launch_tick" 2>/dev/null
      _launch_tick=
    fi
    if [ -z "$_launch_tick" ]; then
      # Own process group: a terminal's ^C is for this shell, not the ticker.
      set -m
      sleep 0.5 </dev/null &
      _launch_tick=$!
      set +m
    fi
    pid=
    wait -n -p pid "${live[@]}" "$_launch_tick" 2>/dev/null
    rc=$?
    [ -z "$pid" ] && continue # a signal whose trap returned, or a lost job
    if [ "$pid" = "$_launch_tick" ]; then
      _launch_tick=
      continue
    fi
    for i in "${!_launch_pids[@]}"; do
      if [ "${_launch_pids[i]}" = "$pid" ]; then
        _launch_done[i]=1
        _launch_idx=$i
        _launch_rc=$rc
        return 0
      fi
    done
  done
}

# _launch_stop sends SIGTERM to every process, waits up to PS_LOCAL_GRACE
# seconds for them to exit, then sends SIGKILL, and reaps them all.
_launch_stop() {
  local i killed=
  _launch_signal TERM
  _launch_to_us "$_launch_grace"
  local grace=$_launch_us
  _launch_now
  local deadline=$((_launch_us + grace))
  while :; do
    _launch_next "$deadline"
    [ "$_launch_idx" -eq -2 ] && break
    [ "$_launch_idx" -ge 0 ] && continue
    if [ -n "$killed" ]; then
      for i in "${!_launch_pids[@]}"; do
        [ -n "${_launch_done[i]:-}" ] ||
          _launch_say "${_launch_names[i]} (pid ${_launch_pids[i]}) survives SIGKILL; giving up on it"
      done
      break
    fi
    for i in "${!_launch_pids[@]}"; do
      [ -n "${_launch_done[i]:-}" ] ||
        _launch_say "${_launch_names[i]} (pid ${_launch_pids[i]}) still running ${_launch_grace}s after SIGTERM; sending SIGKILL"
    done
    _launch_signal KILL
    killed=1
    _launch_now
    deadline=$((_launch_us + 5000000))
  done
  # Leftovers in the groups of processes that exited by themselves.
  _launch_signal KILL
}

_launch_cleanup() {
  [ -n "$_launch_tick" ] && kill "$_launch_tick" 2>/dev/null
  _launch_signal KILL
}

_launch_interrupted() {
  trap '' INT TERM HUP
  _launch_say "caught SIG$1; stopping every process"
  _launch_stop
  exit "$2"
}

launch_job() {
  if [ $# -lt 4 ]; then
    _launch_say "launch_job: too few arguments"
    return 2
  fi
  if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
    _launch_say "needs bash 5.1 or later, this is $BASH_VERSION"
    return 2
  fi
  local mode=$1 num_servers=$2 num_workers=$3
  _launch_bin=$4
  shift 4
  _launch_args=("$@")

  local v
  for v in "$num_servers" "$num_workers"; do
    if ! [[ $v =~ ^[0-9]+$ ]]; then
      _launch_say "NUM_SERVERS and NUM_WORKERS must be whole numbers, got '$v'"
      return 2
    fi
  done
  if ! command -v -- "$_launch_bin" >/dev/null 2>&1; then
    _launch_say "$_launch_bin: no such program"
    return 2
  fi
  local timeout=${PS_LOCAL_TIMEOUT:-120}
  _launch_grace=${PS_LOCAL_GRACE:-3}
  for v in "$timeout" "$_launch_grace"; do
    if ! [[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
      _launch_say "PS_LOCAL_TIMEOUT and PS_LOCAL_GRACE must be seconds, got '$v'"
      return 2
    fi
  done
  if [ -n "${DMLC_PS_ROOT_PORT:-}" ] && ! [[ $DMLC_PS_ROOT_PORT =~ ^[0-9]+$ ]]; then
    _launch_say "DMLC_PS_ROOT_PORT must be a port number, got '$DMLC_PS_ROOT_PORT'"
    return 2
  fi

  if [ -z "${GOMAXPROCS:-}" ]; then
    local procs=$((num_servers + num_workers))
    [ "$mode" = multi ] && procs=$((num_servers + 1))
    _launch_cores
    export GOMAXPROCS=$((procs > 0 && _launch_ncores / procs > 1 ? _launch_ncores / procs : 1))
  fi
  export DMLC_NUM_SERVER=$num_servers
  export DMLC_NUM_WORKER=$num_workers
  export DMLC_PS_ROOT_URI=127.0.0.1
  export DMLC_PS_ROOT_PORT=${DMLC_PS_ROOT_PORT:-$(_launch_free_port)}
  [ "${PS_VERBOSE:-0}" != 0 ] &&
    _launch_say "scheduler at $DMLC_PS_ROOT_URI:$DMLC_PS_ROOT_PORT, $num_servers servers, $num_workers workers"

  trap '_launch_interrupted INT 130' INT
  trap '_launch_interrupted TERM 143' TERM
  trap '_launch_interrupted HUP 129' HUP
  trap _launch_cleanup EXIT

  local deadline=
  if ! [[ $timeout =~ ^0+(\.0+)?$ ]]; then
    _launch_to_us "$timeout"
    local span=$_launch_us
    _launch_now
    deadline=$((_launch_us + span))
  fi

  local i
  if [ "$mode" = multi ]; then
    _launch_start scheduler scheduler scheduler
    for ((i = 0; i < num_servers; i++)); do
      _launch_start "server $i" server server
    done
    _launch_start "worker process" worker worker
  else
    _launch_start scheduler scheduler
    for ((i = 0; i < num_servers; i++)); do
      _launch_start "server $i" server
    done
    for ((i = 0; i < num_workers; i++)); do
      _launch_start "worker $i" worker
    done
  fi

  while :; do
    _launch_next "$deadline"
    case $_launch_idx in
    -2) # every process exited 0
      return 0
      ;;
    -1)
      _launch_say "timed out after ${timeout}s (PS_LOCAL_TIMEOUT); still running:"
      for i in "${!_launch_pids[@]}"; do
        [ -n "${_launch_done[i]:-}" ] || _launch_say "  ${_launch_names[i]} (pid ${_launch_pids[i]})"
      done
      _launch_stop
      return 124
      ;;
    *)
      if [ "$_launch_rc" -ne 0 ]; then
        local rc=$_launch_rc what="status $_launch_rc"
        if [ "$rc" -gt 128 ] && v=$(kill -l "$((rc - 128))" 2>/dev/null); then
          what="$what, i.e. SIG$v"
        fi
        _launch_say "${_launch_names[_launch_idx]} (pid ${_launch_pids[_launch_idx]}) exited with $what; stopping the other processes"
        _launch_stop
        return "$rc"
      fi
      ;;
    esac
  done
}
