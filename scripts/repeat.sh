#!/usr/bin/env bash
# Runs a command N times, stopping at the first failure.
#
#   usage: scripts/repeat.sh N CMD [ARGS...]
#
# Exits 0 when every run passed, else with the failing run's status.
if [ $# -lt 2 ]; then
  echo "usage: $0 N CMD [ARGS...]" >&2
  exit 2
fi
n=$1
shift
for ((i = 0; i < n; i++)); do
  echo "repeat $i: $*"
  "$@"
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "repeat $i failed with status $rc" >&2
    exit $rc
  fi
done
