#!/usr/bin/env bash
# Measures what replication costs: psbench in jobs of 2 servers (1 and 2
# workers) run alternately without and with PS_REPLICAS=1 (which goes
# first swaps every round), the same binary and the same store; prints, per
# measurement, the cost with replicas over the cost without, round by round:
# the median with its quartiles, next to the baseline's own spread and the
# machine's load.
#
#   usage: scripts/bench_replicas.sh       (ROUNDS, default 7; AB_OUT keeps the raw lines)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-7}
tmp=$(mktemp -d)
out=${AB_OUT:-$tmp/ab.txt}
trap 'rm -rf "$tmp"' EXIT
say() { echo "bench_replicas.sh: $*" >&2; }
go build -o build/ ./bench/psbench
runs=("-mode=bulk -n=10000000 -repeat=3 -ops=push,pull" "-mode=latency,window -iters=2000 -requests=100000")
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-600} DMLC_NODE_HOST=127.0.0.1
: >"$out"
for ((r = 1; r <= rounds; r++)); do
  order=(off on)
  if ((r % 2 == 0)); then order=(on off); fi
  say "round $r of $rounds"
  for layout in "2 1" "2 2"; do
    for args in "${runs[@]}"; do
      for x in "${order[@]}"; do
        load=$(cut -d' ' -f1 /proc/loadavg)
        replicas=0
        if [ "$x" = on ]; then replicas=1; fi
        # shellcheck disable=SC2086 # $layout and $args are word lists
        PS_REPLICAS=$replicas scripts/local.sh $layout build/psbench $args -raw=false 2>/dev/null |
          { grep '^RESULT' || true; } |
          awk -v p="AB replicas=$replicas $r $load " '{ print p $0 }' >>"$out"
      done
    done
  done
done
build/psbench compare -a replicas=0 -b replicas=1 <"$out"
