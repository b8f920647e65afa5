#!/usr/bin/env bash
# Runs the experiments behind the results tables in examples/lr/README.md and
# prints Markdown table rows (each job's full output goes to $OUT, default
# build/lr-experiments/).
#
#   usage: examples/lr/experiments.sh [versus|sparse|heart|fashion|rate|sync|all]
#
# "versus" (sparse, heart and fashion) times lr next to liblinear-train -s 0
# on the same files, launch to exit, alternating the two ROUNDS times (default
# 3) so that both see the same load on a shared machine; it prints each
# tool's accuracy, its times, their median and the ratio of the medians.
#   sparse:  the synthetic sparse set of -mode=synth (150,000 + 50,000
#            examples over 1,000,000 ids), 2 servers x 2 workers, FTRL, ASP
#   heart:   heart_scale, 5-fold cross-validation (liblinear -v 5)
#   fashion: Fashion-MNIST (liblinear on its LIBSVM conversion), 1 round
# "rate" measures examples/s on the sparse set with 1, 2 and 4 workers
# (median of 3 runs, 3 epochs); "sync" the consistency models on
# Fashion-MNIST. "all" is versus and rate.
#
# Needs the Debian packages liblinear-tools (heart_scale, liblinear-train)
# and dataset-fashion-mnist (make deps installs both). "all" takes about 15
# minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HEART=/usr/share/doc/liblinear-tools/examples/heart_scale
FM=/usr/share/datasets/fashion-mnist
OUT=${OUT:-build/lr-experiments}
ROUNDS=${ROUNDS:-3}
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-900}
mkdir -p build "$OUT"
go build -o build/ ./examples/lr
SPARSE=$OUT/sparse
FASHION=(-train=$FM/train-images-idx3-ubyte.gz -test=$FM/t10k-images-idx3-ubyte.gz -loss=softmax)
SGD=(-opt=sgd -lr=1 -lr-decay=2 -batch=100 -epochs=20)
# The sparse set's settings: FTRL with a small beta (its rates then do not
# depend on the gradient's scale, the mean over 1,000 examples), one epoch.
SPARSE_LR=(-opt=ftrl -alpha=0.1 -beta=0.001 -batch=1000 -sync=asp)

# sparse_data writes the synthetic sparse set once.
sparse_data() {
  if [ ! -s "$SPARSE/test.svm" ]; then
    mkdir -p "$SPARSE"
    build/lr -mode=synth -out="$SPARSE/train.svm" -test-out="$SPARSE/test.svm" -seed=1 >"$SPARSE/synth.txt"
  fi
}

# timed LOG CMD... runs CMD with its output in LOG and sets SECS to its
# wall time; it fails when CMD does.
timed() {
  local log=$1 t0
  shift
  t0=$EPOCHREALTIME
  "$@" >"$log" 2>&1 || { echo "FAILED: $* (see $log)" >&2; return 1; }
  SECS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
}

median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

versus_header() {
  echo
  echo "| data | tool | setup | accuracy | wall s, launch to exit (rounds) | median | time vs liblinear |"
  echo "|---|---|---|---|---|---|---|"
}

# versus NAME ROUNDS LIBLINEAR-FN LR-FN: alternates the two, ROUNDS times,
# and prints two rows. Each FN runs one round (arguments: the round) and
# sets SECS and ACC.
versus() {
  local name=$1 rounds=$2 ll=$3 ours=$4 r
  local llt=() lrt=() llacc lracc
  for ((r = 1; r <= rounds; r++)); do
    $ll "$r"
    llt+=("$SECS") llacc=$ACC
    $ours "$r"
    lrt+=("$SECS") lracc=$ACC
  done
  local llm lrm
  llm=$(median "${llt[@]}")
  lrm=$(median "${lrt[@]}")
  echo "| $name | liblinear-train -s 0 | 1 core | $llacc | ${llt[*]} | $llm | 1 |"
  echo "| $name | lr | $LRSETUP | $lracc | ${lrt[*]} | $lrm | $(awk -v a="$lrm" -v b="$llm" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }') |"
}

# liblinear_holdout TRAIN TEST LOG: train on TRAIN, score TEST.
liblinear_holdout() {
  local train=$1 test=$2 log=$3
  timed "$log" liblinear-train -s 0 "$train" "$log.model"
  ACC=$(liblinear-predict "$test" "$log.model" /dev/null | sed -E 's/Accuracy = ([0-9.]+)%.*/\1/' | awk '{ printf "%.4f", $1 / 100 }')
}

# lr_job LOG SERVERS WORKERS ARGS...: one job, its final accuracy in ACC.
lr_job() {
  local log=$1 s=$2 w=$3
  shift 3
  timed "$log" scripts/local.sh "$s" "$w" build/lr "$@"
  ACC=$(grep '^final:' "$log" | sed -E 's/.*accuracy ([0-9.]+) .*/\1/')
}

sparse_ll() { liblinear_holdout "$SPARSE/train.svm" "$SPARSE/test.svm" "$OUT/sparse-liblinear-$1.txt"; }
sparse_lr() { lr_job "$OUT/sparse-lr-$1.txt" 2 2 -train="$SPARSE/train.svm" -test="$SPARSE/test.svm" "${SPARSE_LR[@]}" -epochs=1; }
sparse_lr3() { lr_job "$OUT/sparse-lr3-$1.txt" 2 2 -train="$SPARSE/train.svm" -test="$SPARSE/test.svm" "${SPARSE_LR[@]}" -epochs=3; }
heart_ll() {
  timed "$OUT/heart-liblinear-$1.txt" liblinear-train -s 0 -v 5 "$HEART" "$OUT/heart.model"
  ACC=$(sed -nE 's/.*Cross Validation Accuracy = ([0-9.]+)%.*/\1/p' "$OUT/heart-liblinear-$1.txt" | awk '{ printf "%.4f", $1 / 100 }')
}
heart_lr() { lr_job "$OUT/heart-lr-$1.txt" 2 2 -train="$HEART" -cv=5 -epochs=10 -batch=8 -lr=0.1 -sync=bsp; }
fashion_ll() { liblinear_holdout "$OUT/fashion-train.svm" "$OUT/fashion-test.svm" "$OUT/fashion-liblinear-$1.txt"; }
fashion_lr() { lr_job "$OUT/fashion-lr-$1.txt" 2 2 "${FASHION[@]}" "${SGD[@]}" -sync=asp -model="$OUT/fashion.model" -plot="$OUT/fashion.png"; }

what=${1:-all}
if [[ $what == versus || $what == all || $what == sparse || $what == heart || $what == fashion ]]; then
  versus_header
fi
if [[ $what == versus || $what == all || $what == sparse ]]; then
  sparse_data
  LRSETUP="2 servers x 2 workers, ${SPARSE_LR[*]} -epochs=1"
  versus "sparse synthetic" "$ROUNDS" sparse_ll sparse_lr
  LRSETUP="2 servers x 2 workers, ${SPARSE_LR[*]} -epochs=3"
  versus "sparse synthetic" 1 sparse_ll sparse_lr3 | tail -1
fi
if [[ $what == versus || $what == all || $what == heart ]]; then
  LRSETUP="2 servers x 2 workers, 5-fold cv, bsp, sgd -lr=0.1 -batch=8 -epochs=10"
  versus "heart_scale (5-fold cv)" "$ROUNDS" heart_ll heart_lr
fi
if [[ $what == versus || $what == all || $what == fashion ]]; then
  [ -s "$OUT/fashion-test.svm" ] || {
    build/lr -mode=convert -data="$FM/train-images-idx3-ubyte.gz" -out="$OUT/fashion-train.svm" >/dev/null
    build/lr -mode=convert -data="$FM/t10k-images-idx3-ubyte.gz" -out="$OUT/fashion-test.svm" >/dev/null
  }
  LRSETUP="2 servers x 2 workers, asp, ${SGD[*]}"
  versus "Fashion-MNIST" 1 fashion_ll fashion_lr
fi
if [[ $what == rate || $what == all ]]; then
  sparse_data
  echo
  echo "| workers | examples/s over the 3 epochs, median of 3 (the runs) | test accuracy | wall s (median) |"
  echo "|---|---|---|---|"
  for w in 1 2 4; do
    rates=() walls=()
    for rep in 1 2 3; do
      log="$OUT/rate-sparse-w$w-$rep.txt"
      lr_job "$log" 2 "$w" -train="$SPARSE/train.svm" -test="$SPARSE/test.svm" "${SPARSE_LR[@]}" -epochs=3
      rates+=("$(grep '^final:' "$log" | sed -E 's/.* ([0-9]+) examples\/s overall.*/\1/')")
      walls+=("$SECS")
    done
    echo "| $w | $(median "${rates[@]}") (${rates[*]}) | $ACC | $(median "${walls[@]}") |"
  done
fi
if [[ $what == sync ]]; then
  echo
  echo "| run | workers | accuracy | examples/s | pulls held (server 0) |"
  echo "|---|---|---|---|---|"
  for sync in bsp ssp asp; do
    for w in 1 2 4; do
      log="$OUT/fashion-sgd-$sync-w$w.txt"
      lr_job "$log" 2 "$w" "${FASHION[@]}" "${SGD[@]}" -sync=$sync -staleness=2
      rate=$(grep '^final:' "$log" | sed -E 's/.* ([0-9]+) examples\/s overall.*/\1/')
      held=$(grep -o 'pulls held ([0-9.]*%' "$log" | head -1 | sed 's/pulls held (//') || held=-
      echo "| $sync | $w | $ACC | $rate | ${held:--} |"
    done
  done
fi
