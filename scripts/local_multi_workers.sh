#!/usr/bin/env bash
# Like local.sh, but for a program whose workers share one process (several
# customers of one node): each process gets its role as an extra last
# argument ("scheduler", "server" or "worker"), and only one worker process is
# started, whatever NUM_WORKERS (which it reads from DMLC_NUM_WORKER).
#
#   usage: scripts/local_multi_workers.sh NUM_SERVERS NUM_WORKERS BIN [ARGS...]
#   e.g.   scripts/local_multi_workers.sh 2 2 build/test_kv_app_multi_workers
#
# Environment, exit status and failure handling: as for local.sh.
if [ $# -lt 3 ]; then
  echo "usage: $0 NUM_SERVERS NUM_WORKERS BIN [ARGS...]" >&2
  exit 2
fi
source "$(dirname "${BASH_SOURCE[0]}")/_launch.sh" || exit 2
launch_job multi "$@"
exit $?
