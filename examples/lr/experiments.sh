#!/usr/bin/env bash
# Runs the experiments behind the results table in examples/lr/README.md and
# prints one Markdown table row per job (plus each job's full output into
# $OUT, default build/lr-experiments/).
#
#   usage: examples/lr/experiments.sh [heart|fashion|sync|rate|all]
#
# "rate" (not part of "all") measures throughput alone: each consistency
# model with 1, 2 and 4 workers, 3 epochs, run 3 times; it prints the median
# examples/s, which on a shared 2-core machine is steadier than one run.
#
# Needs the Debian packages liblinear-tools (heart_scale, liblinear-train)
# and dataset-fashion-mnist (make deps installs both). Takes about 15 minutes
# on 2 cores for "all".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HEART=/usr/share/doc/liblinear-tools/examples/heart_scale
FM=/usr/share/datasets/fashion-mnist
OUT=${OUT:-build/lr-experiments}
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-900}
mkdir -p build "$OUT"
go build -o build/ ./examples/lr

# job LOG SERVERS WORKERS ARGS... runs one job into LOG.
job() {
  local log=$1
  shift
  scripts/local.sh "$@" >"$log" 2>&1
}

# run NAME SERVERS WORKERS ARGS... runs one job and prints its table row.
run() {
  local name=$1 s=$2 w=$3
  shift 3
  local log="$OUT/$name.txt"
  job "$log" "$s" "$w" build/lr "$@" || {
    echo "| $name | ${s}x$w | FAILED, see $log |"
    return
  }
  local final acc rate held
  final=$(grep '^final:' "$log")
  acc=$(sed -E 's/.*accuracy ([0-9.]+) .*/\1/' <<<"$final")
  rate=$(sed -E 's/.* ([0-9]+) examples\/s overall.*/\1/' <<<"$final")
  held=$(grep -o 'pulls held ([0-9.]*%' "$log" | head -1 | sed 's/pulls held (//') || true
  local args="$*"
  args=${args//$HEART/\$HEART}
  args=${args//$FM/\$FM}
  echo "| $name | ${s}x$w | $acc | $rate | ${held:--} | \`$args\` |"
}

header() {
  echo
  echo "| run | servers x workers | accuracy | examples/s | pulls held (server 0) | arguments |"
  echo "|---|---|---|---|---|---|"
}

what=${1:-all}
if [[ $what == heart || $what == all ]]; then
  echo "liblinear-train -s 0 -v 5 heart_scale: $(cd "$OUT" && liblinear-train -s 0 -v 5 "$HEART" | tail -1)"
  header
  for sync in bsp asp ssp; do
    run "heart-cv5-$sync" 2 2 -train=$HEART -cv=5 -epochs=10 -batch=8 -lr=0.1 -sync=$sync
  done
fi
FASHION=(-train=$FM/train-images-idx3-ubyte.gz -test=$FM/t10k-images-idx3-ubyte.gz)
SGD=(-opt=sgd -lr=1 -lr-decay=2 -batch=100 -epochs=20)
if [[ $what == fashion || $what == all ]]; then
  header
  run fashion-sgd-asp 2 2 "${FASHION[@]}" "${SGD[@]}" -sync=asp -model="$OUT/fashion.model" -plot="$OUT/fashion.png"
  run fashion-ftrl-asp 2 2 "${FASHION[@]}" -opt=ftrl -alpha=0.1 -batch=100 -epochs=20 -sync=asp
fi
if [[ $what == sync || $what == all ]]; then
  header
  for sync in bsp ssp asp; do
    for w in 1 2 4; do
      run "fashion-sgd-$sync-w$w" 2 "$w" "${FASHION[@]}" "${SGD[@]}" -sync=$sync -staleness=2
    done
  done
fi
if [[ $what == rate ]]; then
  echo
  echo "| model | workers | examples/s, median of 3 (the runs) | pulls held (server 0) |"
  echo "|---|---|---|---|"
  for sync in bsp ssp asp; do
    for w in 1 2 4; do
      rates=() held=-
      for rep in 1 2 3; do
        log="$OUT/rate-$sync-w$w-$rep.txt"
        job "$log" 2 "$w" build/lr "${FASHION[@]}" -opt=sgd -lr=1 -lr-decay=2 -batch=100 -epochs=3 \
          -sync=$sync -staleness=2 || { rates+=(FAILED); continue; }
        rates+=("$(grep '^final:' "$log" | sed -E 's/.* ([0-9]+) examples\/s overall.*/\1/')")
        held=$(grep -o 'pulls held ([0-9.]*%' "$log" | head -1 | sed 's/pulls held (//') || held=-
      done
      median=$(printf '%s\n' "${rates[@]}" | sort -n | sed -n 2p)
      echo "| $sync | $w | $median (${rates[*]}) | ${held:--} |"
    done
  done
fi
