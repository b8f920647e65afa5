#!/usr/bin/env bash
# Times a whole job's start-up and shutdown as real processes: test_connection
# (start, then finalize) through scripts/local.sh with 2 servers and WORKERS
# workers, ours against C++ ps-lite's connection_test, alternated run by run
# (which goes first swaps every run), and prints each run's seconds, then
# per side the median with its quartiles and the ratio ours/C++ per run.
#
#   usage: PSLITE_CPP_BUILD=dir scripts/bench_startup.sh [WORKERS] [RUNS]
#   e.g.   PSLITE_CPP_BUILD=~/ps-lite/build scripts/bench_startup.sh 254 5
#
# PSLITE_CPP_BUILD is a C++ ps-lite build of yours (its CMake build
# directory or Makefile checkout; this repository builds no upstream code).
# Without it only ours is timed. Run `make build` first.
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${1:-254} runs=${2:-5}
ours=build/test_connection
[ -x "$ours" ] || { echo "bench_startup.sh: $ours missing: run make build" >&2; exit 2; }
cpp=
if [ -n "${PSLITE_CPP_BUILD:-}" ]; then
  for c in "$PSLITE_CPP_BUILD/tests/connection_test" "$PSLITE_CPP_BUILD/connection_test" \
           "$PSLITE_CPP_BUILD/tests/test_connection" "$PSLITE_CPP_BUILD/test_connection"; do
    [ -x "$c" ] && { cpp=$c; break; }
  done
  [ -n "$cpp" ] || { echo "bench_startup.sh: no connection_test in $PSLITE_CPP_BUILD" >&2; exit 2; }
fi

# job BIN: seconds for one job of BIN, or "fail".
job() {
  local t0 t1
  t0=$(date +%s.%N)
  if ! PS_LOCAL_TIMEOUT=300 scripts/local.sh 2 "$workers" "$1" >/dev/null 2>&1; then
    echo fail
    return
  fi
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}

declare -a t_ours t_cpp
for ((r = 1; r <= runs; r++)); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  if [ -z "$cpp" ]; then
    a=$(job "$ours"); b=-
  elif ((r % 2)); then
    a=$(job "$ours"); b=$(job "$cpp")
  else
    b=$(job "$cpp"); a=$(job "$ours")
  fi
  t_ours+=("$a"); t_cpp+=("$b")
  echo "run $r (load $load): ours ${a}s, C++ ${b}s"
done

# stats NUMBERS...: "median (q1-q3), N runs" of the numbers, failures left out.
stats() {
  printf '%s\n' "$@" | grep -v -e fail -e '^-$' | sort -g | awk '
    function at(p,  i, f) { i = 1 + p * (NR - 1); f = int(i); return v[f] + (i - f) * (v[f + (f < NR)] - v[f]) }
    { v[NR] = $1 }
    END { if (NR == 0) { print "none"; exit } printf "%.2f (%.2f-%.2f), %d runs", at(0.5), at(0.25), at(0.75), NR }'
}
echo "ours: $(stats "${t_ours[@]}")"
if [ -n "$cpp" ]; then
  echo "C++:  $(stats "${t_cpp[@]}")"
  ratios=()
  for ((i = 0; i < runs; i++)); do
    [[ ${t_ours[i]} == fail || ${t_cpp[i]} == fail ]] && continue
    ratios+=("$(echo "scale=4; ${t_ours[i]} / ${t_cpp[i]}" | bc)")
  done
  echo "ours/C++ per run: ${ratios[*]}"
  echo "ours/C++: $(stats "${ratios[@]}")"
fi
