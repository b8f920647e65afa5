#!/usr/bin/env bash
# Measures what one setting costs: psbench run alternately with the
# environment variable VAR set to A and to B (which goes first swaps every
# round), the same binary otherwise; prints, per measurement, B's cost over
# A's, round by round: the median with its quartiles, next to A's own
# spread and the machine's load.
#
#   usage: scripts/bench_setting.sh VAR A B
#   e.g.   scripts/bench_setting.sh PS_KEY_CACHE_MB 0 128
#
# ROUNDS sets the rounds (default 7); AB_OUT keeps the raw lines; LAYOUTS
# the jobs, servers and workers, separated by commas ("1 1,2 2" by
# default); RUNS the psbench arguments of each run, separated by
# semicolons (bulk push and pull of 1e7 keys, then latency and window
# rates, by default).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
var=$1 a=$2 b=$3
rounds=${ROUNDS:-7}
tmp=$(mktemp -d)
out=${AB_OUT:-$tmp/ab.txt}
trap 'rm -rf "$tmp"' EXIT
say() { echo "bench_setting.sh: $*" >&2; }
IFS=, read -r -a layouts <<<"${LAYOUTS:-1 1,2 2}"
IFS=';' read -r -a runs <<<"${RUNS:--mode=bulk -n=10000000 -repeat=3 -ops=push,pull;-mode=latency,window -iters=2000 -requests=100000}"
go build -o build/ ./bench/psbench
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-600} DMLC_NODE_HOST=127.0.0.1
: >"$out"
for ((r = 1; r <= rounds; r++)); do
  order=("$a" "$b")
  if ((r % 2 == 0)); then order=("$b" "$a"); fi
  say "round $r of $rounds"
  for layout in "${layouts[@]}"; do
    for args in "${runs[@]}"; do
      for x in "${order[@]}"; do
        load=$(cut -d' ' -f1 /proc/loadavg)
        # shellcheck disable=SC2086 # $layout and $args are word lists
        env "$var=$x" scripts/local.sh $layout build/psbench $args -raw=false 2>/dev/null |
          { grep '^RESULT' || true; } |
          awk -v p="AB $var=$x $r $load " '{ print p $0 }' >>"$out"
      done
    done
  done
done
build/psbench compare -a "$var=$a" -b "$var=$b" <"$out"
