#!/usr/bin/env bash
# Runs the benchmark suite and writes docs/PERFORMANCE.md: psbench in 1x1
# and 2x2 jobs with 1e6 and 1e7 keys (bulk), plus latency, windowed rate and
# memory growth, and, when PSLITE_CPP_BUILD is set, C++ ps-lite's
# test_kv_app_benchmark next to ours. Expects the programs in build/ (make
# build).
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

# With PSLITE_CPP_BUILD naming a C++ ps-lite build (a checkout built with its
# Makefile, or a CMake build directory; see README), its test_kv_app_benchmark runs
# next to ours, alternately, in the same 1x1 job shape: push and pull of
# 10,000,000 keys to servers that store nothing.
kv_benchmark() { # label binary
  local log
  log=$(DMLC_NODE_HOST=127.0.0.1 scripts/local.sh 1 1 "$2" 2>&1) || { echo "$log" >&2; return 1; }
  for op in Push Pull; do
    v=$(echo "$log" | grep -o "$op average time cost: [0-9.]*" | grep -o '[0-9.]*$')
    printf 'RESULT {"name":"kv_app_benchmark_%s","label":"%s","servers":1,"workers":1,"keys":10000000,"value":%s,"unit":"ms"}\n' \
      "${op,,}" "$1" "$v" >>"$results"
  done
}
# cpp_program DIR NAME finds C++ ps-lite's test program NAME in either
# upstream build layout: its Makefile's tests/test_x (DIR the checkout or its
# tests/) or CMake's tests/x_test (DIR the build directory or its tests/).
cpp_program() {
  local sub n
  for sub in "" tests/; do
    for n in "$2" "${2#test_}_test"; do
      if [ -x "$1/$sub$n" ] && [ ! -d "$1/$sub$n" ]; then echo "$1/$sub$n"; return 0; fi
    done
  done
  echo "bench.sh: no $2 (or ${2#test_}_test) in $1 or $1/tests" >&2
  return 1
}
if [ -n "${PSLITE_CPP_BUILD:-}" ]; then
  cpp_bench=$(cpp_program "$PSLITE_CPP_BUILD" test_kv_app_benchmark) || exit 1
  echo "== test_kv_app_benchmark: C++ ps-lite ($cpp_bench) and ours" >&2
  for i in 1 2 3; do
    kv_benchmark "C++ ps-lite" "$cpp_bench"
    kv_benchmark "ours" build/test_kv_app_benchmark
  done
fi
mkdir -p "$(dirname "$out")"
build/psbench report < "$results" > "$out"
echo "wrote $out" >&2
