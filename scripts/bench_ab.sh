#!/usr/bin/env bash
# Compares two revisions of this repository with psbench: builds each one's
# psbench, runs them alternately (which goes first swaps every round) in 1x1
# and 2x2 jobs (bulk push, pull and push-pull of 1e6 and 1e7 keys, latency,
# windowed and synchronous rates), and prints, per measurement, B's cost
# over A's taken round by round: the median with its quartiles, next to
# A's own spread and the machine's load.
#
#   usage: scripts/bench_ab.sh REV_A [REV_B]    (REV_B: the work tree)
#   e.g.   ROUNDS=9 scripts/bench_ab.sh HEAD~3
#
# ROUNDS sets the rounds (default 7), AB_OUT keeps the raw lines (each
# "AB <build> <round> <load> RESULT {...}"), AB_MODES limits the runs to
# "bulk" or "latency" ones.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
rev_a=$1 rev_b=${2:-}
# The builds' names in the results: no spaces, and distinct even for one
# revision compared with itself (a measure of the noise).
name_a="A:$rev_a" name_b="B:${rev_b:-worktree}"
rounds=${ROUNDS:-7}
tmp=$(mktemp -d)
out=${AB_OUT:-$tmp/ab.txt}
cleanup() {
  git worktree remove --force "$tmp/src-a" >/dev/null 2>&1 || true
  git worktree remove --force "$tmp/src-b" >/dev/null 2>&1 || true
  rm -rf "$tmp"
  git worktree prune
}
trap cleanup EXIT
say() { echo "bench_ab.sh: $*" >&2; }

# build REV X puts REV's psbench (the work tree's when REV is empty) in
# $tmp/bin-X, building it in a worktree $tmp/src-X.
build() {
  if [ -z "$1" ]; then
    go build -o "$tmp/bin-$2/" ./bench/psbench
    return
  fi
  git worktree add -q --detach "$tmp/src-$2" "$1"
  (cd "$tmp/src-$2" && go build -o "$tmp/bin-$2/" ./bench/psbench)
}
mkdir -p build
say "building $rev_a and ${rev_b:-the work tree}"
build "$rev_a" a
build "$rev_b" b
go build -o build/ ./bench/psbench # for compare

runs=()
case ${AB_MODES:-all} in
  bulk) runs=("-mode=bulk -n=1000000 -repeat=5" "-mode=bulk -n=10000000 -repeat=3") ;;
  latency) runs=("-mode=latency,window -iters=2000 -requests=100000") ;;
  *) runs=("-mode=bulk -n=1000000 -repeat=5" "-mode=bulk -n=10000000 -repeat=3" "-mode=latency,window -iters=2000 -requests=100000") ;;
esac
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-600} DMLC_NODE_HOST=127.0.0.1
: >"$out"
for ((r = 1; r <= rounds; r++)); do
  order=(a b)
  if ((r % 2 == 0)); then order=(b a); fi
  say "round $r of $rounds"
  for layout in "1 1" "2 2"; do
    for args in "${runs[@]}"; do
      for x in "${order[@]}"; do
        load=$(cut -d' ' -f1 /proc/loadavg)
        # shellcheck disable=SC2086 # $layout and $args are word lists
        scripts/local.sh $layout "$tmp/bin-$x/psbench" $args -raw=false 2>/dev/null |
          { grep '^RESULT' || true; } |
          awk -v p="AB $([ "$x" = a ] && echo "$name_a" || echo "$name_b") $r $load " '{ print p $0 }' >>"$out"
      done
    done
  done
done
build/psbench compare -a "$name_a" -b "$name_b" <"$out"
