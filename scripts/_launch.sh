# Shared by local.sh and local_multi_workers.sh (sourced, not run): starts the
# nodes of a job on this machine and supervises them.
#
# Caller sets NUM_SERVERS, NUM_WORKERS, BIN, ARGS (array) and calls
# launch_job MODE, where MODE is "single" (one process per worker, like
# ps-lite's local.sh) or "multi" (the role is passed as the last argument and
# one worker process hosts every worker, like local_multi_workers.sh).
#
# Environment: DMLC_PS_ROOT_PORT (default: a free port), PS_LOCAL_TIMEOUT
# (seconds before the job is killed, default 120); everything else (PS_VERBOSE,
# DMLC_LOCAL, PS_RESEND, ...) passes through to the nodes.

pids=()
names=()

free_port() {
  local p i
  for i in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo 8000
}

kill_all() {
  local sig=$1 p
  for p in "${pids[@]}"; do
    kill "-$sig" "$p" 2>/dev/null
  done
}

# stop_all: SIGTERM every node still running, SIGKILL after a grace period.
stop_all() {
  kill_all TERM
  local i
  for i in $(seq 1 20); do
    local alive=0 p
    for p in "${pids[@]}"; do
      kill -0 "$p" 2>/dev/null && alive=1
    done
    [ $alive = 0 ] && return
    sleep 0.1
  done
  kill_all KILL
}

stop_watchdog() {
  pkill -P "$watchdog" 2>/dev/null
  kill "$watchdog" 2>/dev/null
}

start_node() { # name role [extra args]
  local name=$1 role=$2
  shift 2
  DMLC_ROLE=$role "$BIN" "${ARGS[@]}" "$@" &
  pids+=($!)
  names+=("$name")
}

launch_job() {
  local mode=$1
  export DMLC_NUM_SERVER=$NUM_SERVERS
  export DMLC_NUM_WORKER=$NUM_WORKERS
  export DMLC_PS_ROOT_URI=${DMLC_PS_ROOT_URI:-127.0.0.1}
  export DMLC_PS_ROOT_PORT=${DMLC_PS_ROOT_PORT:-$(free_port)}
  local timeout=${PS_LOCAL_TIMEOUT:-120}

  trap 'echo "local: interrupted, stopping the job" >&2; stop_all; stop_watchdog; exit 130' INT TERM
  # The watchdog signals this shell when the time is up; the signal also
  # interrupts the wait below.
  timed_out=0
  trap 'timed_out=1' USR1
  (sleep "$timeout" && kill -USR1 $$) 2>/dev/null &
  watchdog=$!

  local extra=()
  [ "$mode" = multi ] && extra=(scheduler)
  start_node scheduler scheduler "${extra[@]}"
  local i
  for ((i = 0; i < NUM_SERVERS; i++)); do
    [ "$mode" = multi ] && extra=(server)
    start_node "server $i" server "${extra[@]}"
  done
  if [ "$mode" = multi ]; then
    start_node "worker process" worker worker
  else
    for ((i = 0; i < NUM_WORKERS; i++)); do
      start_node "worker $i" worker
    done
  fi

  # Supervise: reap nodes as they exit; the first failure or the timeout
  # stops the rest.
  local running=${#pids[@]} failed=0
  local done_=()
  while [ "$running" -gt 0 ]; do
    if [ $timed_out = 1 ]; then
      echo "local: job still running after ${timeout}s (PS_LOCAL_TIMEOUT); killing it" >&2
      for i in "${!pids[@]}"; do
        [ -z "${done_[$i]:-}" ] && kill -0 "${pids[$i]}" 2>/dev/null && echo "local: ${names[$i]} (pid ${pids[$i]}) hung" >&2
      done
      stop_all
      wait "${pids[@]}" 2>/dev/null
      return 124
    fi
    local exited=
    wait -n -p exited "${pids[@]}" 2>/dev/null
    local rc=$?
    [ -z "$exited" ] && continue # interrupted by the watchdog

    for i in "${!pids[@]}"; do
      if [ "${pids[$i]}" = "$exited" ]; then
        done_[$i]=1
        if [ $rc -ne 0 ]; then
          echo "local: ${names[$i]} exited with status $rc; stopping the job" >&2
          failed=$rc
        fi
      fi
    done
    running=$((running - 1))
    if [ $failed -ne 0 ]; then
      stop_all
      wait "${pids[@]}" 2>/dev/null
      stop_watchdog
      return $failed
    fi
  done
  stop_watchdog
  return 0
}
