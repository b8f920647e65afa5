#!/usr/bin/env bash
# Runs a command N times, one after the other, stopping at the first failure.
#
#   usage: scripts/repeat.sh N CMD [ARGS...]
#   e.g.   scripts/repeat.sh 10 scripts/local.sh 2 2 build/test_kv_app
#
# Prints "repeat i: CMD ARGS..." before run i (counting from 0). Exits 0 when
# every run passed, else with the status of the failing run.
if [ $# -lt 2 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 N CMD [ARGS...]" >&2
  exit 2
fi
n=$1
shift
for ((i = 0; i < n; i++)); do
  echo "repeat $i: $*"
  "$@"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "$(basename "$0"): run $i of $n failed with status $rc" >&2
    exit "$rc"
  fi
done
exit 0
