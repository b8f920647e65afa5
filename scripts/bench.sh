#!/usr/bin/env bash
# Runs the benchmark suite and writes docs/PERFORMANCE.md: psbench in 1x1
# and 2x2 jobs with 1e6 and 1e7 keys (bulk), plus latency, windowed rate and
# memory growth. Expects the programs in build/ (make build).
#
# With PSLITE_CPP_BUILD naming a C++ ps-lite build, it also builds
# bench/cpp/psbench.cc (our benchmark written against ps-lite's public API)
# into build/cpp-psbench and runs it alternately with ours, round after
# round, in the same job shapes; and runs C++ ps-lite's test_kv_app_benchmark
# next to ours, and a C++ worker of it against our scheduler and server.
# PSLITE_CPP_BUILD may be:
#   - a checkout built with its Makefile: include/ps/ps.h, build/libps.a,
#     tests/test_kv_app_benchmark (deps/include and deps/lib are used when
#     present, as its Makefile puts protobuf and ZeroMQ there);
#   - a CMake build directory: libpslite.a, tests/kv_app_benchmark_test
#     (or test_kv_app_benchmark), with the headers in the checkout above it
#     (../include), or given as PSLITE_CPP_INCLUDE.
# PSLITE_CPP_INCLUDE and PSLITE_CPP_LIB override the header directory and
# the library. BENCH_ROUNDS sets the rounds (default 7 with C++, else 1);
# which of ours and C++ goes first swaps every round, and the machine's
# load at the start of each run goes into the report.
# Our nodes run on the transport DMLC_PS_VAN_TYPE names, as they would in a
# job: the ZMTP one when it is unset. DMLC_PS_VAN_TYPE=zmq runs them on
# libzmq, as C++ ps-lite's nodes always are: make bench-zmq writes
# docs/PERFORMANCE-ZMQ.md so.
# C++ ps-lite's psbench runs with glibc's allocator kept warm (one arena,
# no mapping of its own, no trimming: BENCH_CPP_TUNABLES, GLIBC_TUNABLES'
# syntax; empty for glibc's defaults): by default libzmq and ps-lite
# allocate every large message fresh and give it back to the system, and
# on a virtual machine whose page faults are dear that, not the transfer,
# was most of a warm bulk row. Our nodes and the raw baseline keep their
# buffers too (the raw baseline by the same settings, made with mallopt in
# bench/psbench/raw.go). test_kv_app_benchmark's runs are cold and keep the defaults.
#
#   usage: scripts/bench.sh [OUT]     (default OUT: docs/PERFORMANCE.md)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/PERFORMANCE.md}
# BENCH_RESULTS keeps the raw RESULT lines in a file (build/psbench report
# < file renders them again).
if [ -n "${BENCH_RESULTS:-}" ]; then
  results=$BENCH_RESULTS
  : >"$results"
else
  results=$(mktemp)
  trap 'rm -f "$results"' EXIT
fi
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-600}
cpp_tunables=${BENCH_CPP_TUNABLES-glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824}
say() { echo "bench.sh: $*" >&2; }

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
  say "no $2 (or ${2#test_}_test) in $1 or $1/tests"
  return 1
}

# build_cpp_psbench compiles bench/cpp/psbench.cc against PSLITE_CPP_BUILD
# into build/cpp-psbench; it fails saying what it could not find.
build_cpp_psbench() {
  local d=$PSLITE_CPP_BUILD inc=${PSLITE_CPP_INCLUDE:-} lib=${PSLITE_CPP_LIB:-} c
  if [ -z "$inc" ]; then
    for c in "$d/include" "$d/../include"; do
      if [ -f "$c/ps/ps.h" ]; then inc=$c; break; fi
    done
  fi
  if [ -z "$lib" ]; then
    for c in "$d/build/libps.a" "$d/libps.a" "$d/libpslite.a"; do
      if [ -f "$c" ]; then lib=$c; break; fi
    done
  fi
  [ -n "$inc" ] || { say "no ps/ps.h in $d/include or $d/../include; set PSLITE_CPP_INCLUDE"; return 1; }
  [ -n "$lib" ] || { say "no build/libps.a or libpslite.a in $d; set PSLITE_CPP_LIB"; return 1; }
  local flags=(-std=c++14 -O2 -pthread -isystem "$inc")
  local libs=("$lib" -lzmq -lprotobuf -lpthread)
  if [ -d "$d/deps/include" ]; then flags+=(-isystem "$d/deps/include"); fi
  if [ -d "$d/deps/lib" ]; then libs=("$lib" -L"$d/deps/lib" -lzmq -lprotobuf -lpthread); fi
  say "building build/cpp-psbench against $inc and $lib"
  ${CXX:-g++} "${flags[@]}" bench/cpp/psbench.cc "${libs[@]}" -o build/cpp-psbench
}

cpp=""
if [ -n "${PSLITE_CPP_BUILD:-}" ]; then
  build_cpp_psbench || exit 1
  cpp_kvbench=$(cpp_program "$PSLITE_CPP_BUILD" test_kv_app_benchmark) || exit 1
  cpp=build/cpp-psbench
  echo "CPPMALLOC ${cpp_tunables:--}" >>"$results"
fi
rounds=${BENCH_ROUNDS:-$([ -n "$cpp" ] && echo 7 || echo 1)}

# Our nodes use the transport DMLC_PS_VAN_TYPE names (zmtp by default, or
# zmq); C++ ps-lite's know only zmq, so they run without it.
van=${DMLC_PS_VAN_TYPE:-zmtp}
unset DMLC_PS_VAN_TYPE
ours() { DMLC_PS_VAN_TYPE=$van "$@"; }

# A C++ ps-lite job that aborts is run again, up to twice: its servers abort
# now and then at start-up, in all-C++ jobs too ("obj timeout (5 sec) to
# wait App 0 customer 0 ready", docs/LIBRARY.md). A run's RESULT lines are
# kept only when the whole job succeeds; ours gets no second try.
run() { # program servers workers args...
  local p=$1 s=$2 w=$3 how=ours tries=1 try out
  shift 3
  [ "$p" != "$cpp" ] || how="env GLIBC_TUNABLES=$cpp_tunables" tries=3
  echo "== ${p##*/} ${s}x${w} $*" >&2
  for ((try = 1; ; try++)); do
    out=$(mktemp)
    echo "LOAD $(cut -d' ' -f1 /proc/loadavg)" >"$out"
    echo "FAULT $(build/psbench faultcost)" >>"$out"
    if DMLC_NODE_HOST=127.0.0.1 $how scripts/local.sh "$s" "$w" "$p" "$@" | tee -a "$out" | { grep -v '^RESULT' || true; } >&2; then
      cat "$out" >>"$results"
      rm -f "$out"
      return 0
    fi
    rm -f "$out"
    if ((try >= tries)); then
      echo "bench.sh: ${p##*/} ${s}x${w} $* failed" >&2
      return 1
    fi
    echo "bench.sh: ${p##*/} failed (try $try of $tries); running it again" >&2
  done
}
# both runs ours and C++ ps-lite's (when built) with the same arguments,
# ours first in odd rounds and second in even ones.
both() { # servers workers args...
  # (-label="": its default is "C++ ps-lite"; local.sh would split a label with a space)
  if [ -n "$cpp" ] && ((round % 2 == 0)); then run "$cpp" "$@"; fi
  run build/psbench "$@" -label=""
  if [ -n "$cpp" ] && ((round % 2 == 1)); then run "$cpp" "$@"; fi
}
for ((round = 1; round <= rounds; round++)); do
  for layout in "1 1" "2 2"; do
    both $layout -mode=bulk -n=1000000 -repeat=5
    both $layout -mode=bulk -n=10000000 -repeat=3
    both $layout -mode=bulk -n=10000000 -repeat=3 -ops=push,pull -keys=hashed
    both $layout -mode=latency,window -iters=2000 -requests=100000
  done
done
run build/psbench 1 1 -mode=memory -mem-requests=1000000

# C++ ps-lite's test_kv_app_benchmark next to ours, alternately, in the same
# 1x1 job shape (push and pull of 10,000,000 keys to servers that store
# nothing), and a C++ worker of it against our scheduler and server.
kv_record() { # label log
  local op v
  for op in Push Pull; do
    v=$(echo "$2" | grep -o "$op average time cost: [0-9.]*" | grep -o '[0-9.]*$')
    printf 'RESULT {"name":"kv_app_benchmark_%s","label":"%s","servers":1,"workers":1,"keys":10000000,"value":%s,"unit":"ms"}\n' \
      "${op,,}" "$1" "$v" >>"$results"
  done
}
kv_benchmark() { # label binary
  local log how=env
  echo "FAULT $(build/psbench faultcost)" >>"$results"
  [ "$1" != ours ] || how=ours
  log=$(DMLC_NODE_HOST=127.0.0.1 $how scripts/local.sh 1 1 "$2" 2>&1) || { echo "$log" >&2; return 1; }
  kv_record "$1" "$log"
}
# kv_mixed runs our scheduler and server with a C++ worker.
kv_mixed() { # cpp-binary
  local port log pids=()
  echo "FAULT $(build/psbench faultcost)" >>"$results"
  port=$((20000 + RANDOM % 20000))
  export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NODE_HOST=127.0.0.1
  DMLC_ROLE=scheduler ours build/test_kv_app_benchmark >/dev/null 2>&1 &
  pids+=($!)
  DMLC_ROLE=server ours build/test_kv_app_benchmark >/dev/null 2>&1 &
  pids+=($!)
  log=$(DMLC_ROLE=worker timeout "$PS_LOCAL_TIMEOUT" "$1" 2>&1) || { echo "$log" >&2; kill "${pids[@]}" 2>/dev/null; return 1; }
  wait "${pids[@]}"
  unset DMLC_NUM_SERVER DMLC_NUM_WORKER DMLC_PS_ROOT_URI DMLC_PS_ROOT_PORT DMLC_NODE_HOST
  kv_record "C++ worker, our servers" "$log"
}
if [ -n "$cpp" ]; then
  echo "== test_kv_app_benchmark: C++ ps-lite ($cpp_kvbench), ours, and a C++ worker with our servers" >&2
  for ((round = 1; round <= rounds; round++)); do
    if ((round % 2 == 1)); then
      kv_benchmark "C++ ps-lite" "$cpp_kvbench"
      kv_benchmark "ours" build/test_kv_app_benchmark
      kv_mixed "$cpp_kvbench"
    else
      kv_mixed "$cpp_kvbench"
      kv_benchmark "ours" build/test_kv_app_benchmark
      kv_benchmark "C++ ps-lite" "$cpp_kvbench"
    fi
  done
fi
mkdir -p "$(dirname "$out")"
build/psbench report -van="$van" < "$results" > "$out"
echo "wrote $out" >&2
