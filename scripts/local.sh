#!/usr/bin/env bash
# Runs a ps-lite job on this machine: one scheduler, NUM_SERVERS servers and
# NUM_WORKERS workers, each a process "BIN ARGS...", started in that order in
# the background.
#
#   usage: scripts/local.sh NUM_SERVERS NUM_WORKERS BIN [ARGS...]
#   e.g.   PS_VERBOSE=1 scripts/local.sh 2 2 build/test_kv_app
#
# Every process gets DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_PS_ROOT_URI
# (127.0.0.1), DMLC_PS_ROOT_PORT and its DMLC_ROLE; the rest of the caller's
# environment (PS_VERBOSE, PS_RESEND, DMLC_LOCAL, ...) passes through. Their
# output goes straight to this script's stdout and stderr.
#
# Environment:
#   DMLC_PS_ROOT_PORT  scheduler port (default: a free port)
#   PS_LOCAL_TIMEOUT   seconds before a running job is killed (default 120,
#                      0 = no limit); the script then exits 124
#   PS_LOCAL_GRACE     seconds from SIGTERM to SIGKILL when stopping (default 3)
#
# Exits 0 when every process exits 0. When one fails, the script names it,
# stops the others and exits with its status. Interrupting the script stops
# every process.
if [ $# -lt 3 ]; then
  echo "usage: $0 NUM_SERVERS NUM_WORKERS BIN [ARGS...]" >&2
  exit 2
fi
source "$(dirname "${BASH_SOURCE[0]}")/_launch.sh" || exit 2
launch_job single "$@"
exit $?
