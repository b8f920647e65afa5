#!/usr/bin/env bash
# Like local.sh, but all NUM_WORKERS workers run in one process, as several
# customers of one node; every process gets its role (scheduler, server or
# worker) as its last argument.
#
#   usage: scripts/local_multi_workers.sh NUM_SERVERS NUM_WORKERS BIN [ARGS...]
if [ $# -lt 3 ]; then
  echo "usage: $0 NUM_SERVERS NUM_WORKERS BIN [ARGS...]" >&2
  exit 2
fi
NUM_SERVERS=$1
NUM_WORKERS=$2
BIN=$3
shift 3
ARGS=("$@")
source "$(dirname "$0")/_launch.sh"
launch_job multi
