#!/usr/bin/env bash
# Runs the benchmark suite and writes docs/PERFORMANCE.md: psbench in 1x1
# and 2x2 jobs with 1e6 and 1e7 keys (bulk), plus latency, windowed rate and
# memory growth. Expects the programs in build/ (make build).
#
#   usage: scripts/bench.sh [OUT]     (default OUT: docs/PERFORMANCE.md)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/PERFORMANCE.md}
results=$(mktemp)
trap 'rm -f "$results"' EXIT
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-600}
run() { # servers workers args...
  local s=$1 w=$2
  shift 2
  echo "== psbench ${s}x${w} $*" >&2
  scripts/local.sh "$s" "$w" build/psbench -label="" "$@" | tee -a "$results" | grep -v '^RESULT' >&2
}
for layout in "1 1" "2 2"; do
  run $layout -mode=bulk -n=1000000 -repeat=5
  run $layout -mode=bulk -n=10000000 -repeat=3
  run $layout -mode=latency,window -iters=2000 -requests=100000
done
run 1 1 -mode=memory -mem-requests=1000000
mkdir -p "$(dirname "$out")"
build/psbench report < "$results" > "$out"
echo "wrote $out" >&2
