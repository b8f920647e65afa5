#!/usr/bin/env bash
# Builds lr, fm and mvm and trains them side by side on a generated CTR set
# (20 fields, one value in each, labels from a hidden factorization
# machine: feature interactions carry more than single features), with 2
# servers and 2 workers each: test AUC, time and a plot per model in
# build/. Then scores fm's model again with the stand-alone predict mode.
# Takes about half a minute on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-300}
mkdir -p build
go build -o build/ ./examples/lr ./examples/fm ./examples/mvm
build/fm -mode=synth -fields=20 -ids=200000 -rows=200000 -test-rows=40000 -seed=7 \
  -out=build/ctr.train -test-out=build/ctr.test
echo
for m in lr fm mvm; do
  echo "== $m: 2 servers x 2 workers, FTRL, 3 epochs"
  start=$(date +%s.%N)
  scripts/local.sh 2 2 build/$m -train=build/ctr.train -test=build/ctr.test -opt=ftrl -alpha=1 \
    -factors=10 -batch=200 -epochs=3 -model=build/$m-ctr.model -plot=build/$m-ctr.png |
    grep -v '^\[server'
  awk -v m="$m" -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%s: %.1f s launch to exit\n\n", m, e - s }'
done
echo "predict (stand-alone, no cluster): $(build/fm -mode=predict -model=build/fm-ctr.model -data=build/ctr.test)"
