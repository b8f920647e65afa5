#!/usr/bin/env bash
# Runs a ps-lite job on this machine: one scheduler, NUM_SERVERS servers and
# NUM_WORKERS workers, each a process of BIN with ARGS.
#
#   usage: scripts/local.sh NUM_SERVERS NUM_WORKERS BIN [ARGS...]
#
# Exits 0 when every node exits 0. When a node fails, the others are stopped
# and the script exits with that node's status; a job still running after
# PS_LOCAL_TIMEOUT seconds (default 120) is killed (exit 124). The scheduler
# port is DMLC_PS_ROOT_PORT when set, else a free port.
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
launch_job single
