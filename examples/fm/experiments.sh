#!/usr/bin/env bash
# Runs our lr, fm and mvm side by side with xflow's (github.com/xswang/xflow),
# and xflow's own workers against our servers. Needs a build of xflow:
#
#   usage: XFLOW_BUILD=DIR examples/fm/experiments.sh [versus|workers|all]
#
#   versus   on xflow's data/ files and on a generated CTR set: each model,
#            ours and xflow's alternated, ROUNDS rounds, 2 servers and 2
#            workers; prints test AUC, log loss, wall time (launch to exit)
#            and the servers' peak RSS, medians over the rounds
#   workers  xflow's worker binary (LR, FM, MVM) against xflow's servers and
#            against ours (fm -mode=xflow-server, scheduler ours too),
#            alternated; fails unless the median AUC on ours lies within the
#            range of xflow's own runs, widened by 0.02 (xflow's AUC varies
#            from run to run: asynchronous workers, random starts, and an
#            MVM whose predictions are all 0.5, their AUC set by tie order)
#
# XFLOW_BUILD is xflow's CMake build directory (its binary is
# test/src/xflow_lr; XFLOW_BIN overrides); xflow's data/ is found through
# its CMakeCache.txt (XFLOW_DATA overrides). README.md says how xflow was
# built here. Environment: ROUNDS (default 3), GEN_ROWS, GEN_IDS, GEN_FIELDS,
# GEN_EPOCHS (the generated set: default 200000 rows, 200000 ids, 20
# fields, 2 epochs), SMALL_EPOCHS (xflow's files: default 100, as xflow's
# scripts), SETS (versus: "small gen"), PS_LOCAL_TIMEOUT (per job, default
# 600 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
: "${XFLOW_BUILD:?set XFLOW_BUILD to an xflow build directory}"
XFLOW_BIN=${XFLOW_BIN:-$XFLOW_BUILD/test/src/xflow_lr}
[ -x "$XFLOW_BIN" ] || { echo "no xflow binary at $XFLOW_BIN" >&2; exit 1; }
if [ -z "${XFLOW_DATA:-}" ]; then
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$XFLOW_BUILD/CMakeCache.txt" 2>/dev/null || true)
  XFLOW_DATA=$src/data
fi
[ -f "$XFLOW_DATA/small_train-00000" ] || { echo "no xflow data in $XFLOW_DATA (set XFLOW_DATA)" >&2; exit 1; }
ROUNDS=${ROUNDS:-3}
GEN_ROWS=${GEN_ROWS:-200000} GEN_IDS=${GEN_IDS:-200000} GEN_FIELDS=${GEN_FIELDS:-20} GEN_EPOCHS=${GEN_EPOCHS:-2}
SMALL_EPOCHS=${SMALL_EPOCHS:-100}
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-600}
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
command -v bc >/dev/null || { echo "needs bc (apt-get install bc)" >&2; exit 1; }

go build -o build/ ./examples/lr ./examples/fm ./examples/mvm
root=$(pwd)
W=$(mktemp -d /tmp/xflow-exp.XXXXXX)
trap 'rm -rf "$W"' EXIT

# Every process of a job runs under this wrapper: its role, wall time and
# peak RSS go to $TIMES.
cat >"$W/timed" <<'EOF'
#!/usr/bin/env bash
exec /usr/bin/time -f "$DMLC_ROLE %e %M" -a -o "$TIMES" "$@"
EOF
# A job of xflow workers and our scheduler and servers.
cat >"$W/mixed" <<EOF
#!/usr/bin/env bash
if [ "\$DMLC_ROLE" = worker ]; then exec "$XFLOW_BIN" "\$@"; fi
exec "$root/build/fm" -mode=xflow-server -seed="\$SERVER_SEED"
EOF
chmod +x "$W/timed" "$W/mixed"

# The data: xflow reads one file per worker (PREFIX-0000r, rank 0 alone
# scores PREFIX-00000 of the test prefix); ours reads one file sharded.
mkdir -p "$W/small" "$W/gen"
cat "$XFLOW_DATA/small_train-00000" "$XFLOW_DATA/small_train-00001" >"$W/small/train"
cp "$XFLOW_DATA/small_train-00000" "$XFLOW_DATA/small_train-00001" "$W/small/"
cp "$XFLOW_DATA/small_test-00000" "$W/small/test"
cp "$XFLOW_DATA/small_test-00000" "$W/small/small_test-00000"
build/fm -mode=synth -fields="$GEN_FIELDS" -ids="$GEN_IDS" -rows="$GEN_ROWS" -test-rows=$((GEN_ROWS / 5)) \
  -seed=7 -out="$W/gen/train" -test-out="$W/gen/test" | sed 's/^/generated: /'
split -n l/2 -d -a 5 "$W/gen/train" "$W/gen/gen_train-"
cp "$W/gen/test" "$W/gen/gen_test-00000"

# job DIR CMD...: runs a 2x2 job in DIR, its output in DIR/out; prints the
# wall time and the servers' largest peak RSS (MB).
job() {
  local dir=$1; shift
  mkdir -p "$dir"
  : >"$dir/times"
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$dir" && TIMES="$dir/times" "$root/scripts/local.sh" 2 2 "$W/timed" "$@" >"$dir/out" 2>&1) ||
    { echo "job failed: $*" >&2; tail -20 "$dir/out" >&2; return 1; }
  t1=$(date +%s.%N)
  local rss
  rss=$(awk '$1 == "server" && $3 > m {m = $3} END {printf "%.1f", m / 1024}' "$dir/times")
  echo "$(echo "$t1 - $t0" | bc -l) $rss"
}

# ours MODEL SET EPOCHS: AUC, log loss, wall s, server MB.
ours() {
  local model=$1 set=$2 epochs=$3 dir="$W/run/ours-$1-$2-$RANDOM"
  # xflow's FTRL settings on its 400 rows, which need its strong L2;
  # faster learning on the generated set. Values are read as xflow reads
  # them (binary), ids hashed (xflow hashes them too), factors of 10 as
  # its v_dim; the model is scored once, after the last epoch, as xflow's.
  local opt=(-opt=ftrl -alpha=0.05 -beta=1 -l1=5e-5 -l2=10 -init-std=0.01)
  [ "$set" = gen ] && opt=(-opt=ftrl -alpha=1 -beta=1)
  local r
  r=$(job "$dir" "$root/build/$model" -train="$W/$set/train" -test="$W/$set/test" -binary -hash-bits=30 \
    "${opt[@]}" -factors=10 -batch=200 -epochs="$epochs" -eval-every="$epochs")
  local line
  line=$(grep '^final:' "$dir/out")
  local auc ll
  auc=$(sed -n 's/.*AUC \([0-9.]*\).*/\1/p' <<<"$line")
  ll=$(sed -n 's/.*test loss \([0-9.]*\).*/\1/p' <<<"$line")
  echo "$auc $ll $r"
}

# theirs MODEL SET EPOCHS [mixed]: AUC, log loss (xflow prints the mean
# log2 likelihood; this is its negative in nats), wall s, server MB.
theirs() {
  local model=$1 set=$2 epochs=$3 bin=$XFLOW_BIN dir="$W/run/xflow-$1-$2-$RANDOM"
  [ "${4:-}" = mixed ] && bin=$W/mixed
  local m
  case $model in lr) m=0 ;; fm) m=1 ;; mvm) m=2 ;; esac
  local prefix=small_train test=small_test
  [ "$set" = gen ] && prefix=gen_train test=gen_test
  local r
  r=$(job "$dir" "$bin" "$W/$set/$prefix" "$W/$set/$test" "$m" "$epochs")
  local line
  line=$(grep -a 'auc = ' "$dir/out" | tail -1)
  local auc ll
  auc=$(sed -n 's/.*auc = \([-0-9.na]*\).*/\1/p' <<<"$line")
  ll=$(sed -n 's/.*logloss: \([-0-9.na]*\).*/\1/p' <<<"$line")
  ll=$(awk -v l="$ll" 'BEGIN { if (l ~ /nan/) print "nan"; else printf "%.4f", -l * log(2) }')
  echo "$auc $ll $r"
}

# median of the numbers on stdin.
median() { sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# quartiles of the numbers on stdin: "median [Q1, Q3]" (nearest rank).
quartiles() {
  sort -g | awk '{a[NR] = $1} END {
    q1 = a[int((NR + 3) / 4)]; q3 = a[NR + 1 - int((NR + 3) / 4)]
    m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    printf "%.2fx [%.2f, %.2f]", m, q1, q3 }'
}

versus() {
  echo
  echo "ours against xflow, 2 servers x 2 workers, $ROUNDS rounds alternated, medians (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "| data | model | AUC ours | AUC xflow | log loss ours | log loss xflow | wall ours s | wall xflow s | wall ratio, per round [Q1, Q3] | server MB ours | server MB xflow |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  local set model epochs
  for set in ${SETS:-small gen}; do
    epochs=$SMALL_EPOCHS
    [ "$set" = gen ] && epochs=$GEN_EPOCHS
    for model in lr fm mvm; do
      : >"$W/o" ; : >"$W/x"
      for _ in $(seq "$ROUNDS"); do
        ours "$model" "$set" "$epochs" >>"$W/o"
        theirs "$model" "$set" "$epochs" >>"$W/x"
      done
      local c
      local -a o x
      for c in 1 2 3 4; do
        o[c]=$(cut -d' ' -f$c "$W/o" | median)
        x[c]=$(cut -d' ' -f$c "$W/x" | median)
      done
      local name="xflow's data/ ($epochs epochs)"
      [ "$set" = gen ] && name="generated, $GEN_ROWS rows ($epochs epochs)"
      local ratios
      ratios=$(paste -d' ' <(cut -d' ' -f3 "$W/o") <(cut -d' ' -f3 "$W/x") | awk '{print $1 / $2}' | quartiles)
      printf "| %s | %s | %s | %s | %s | %s | %.2f | %.2f | %s | %s | %s |\n" "$name" "$model" \
        "${o[1]}" "${x[1]}" "${o[2]}" "${x[2]}" "${o[3]}" "${x[3]}" "$ratios" "${o[4]}" "${x[4]}"
    done
  done
}

workers() {
  echo
  echo "xflow's workers on xflow's servers and on ours, xflow's data/, $SMALL_EPOCHS epochs, $ROUNDS rounds alternated"
  echo "| model | AUC, xflow's servers | AUC, our servers | median, ours | xflow's range |"
  echo "|---|---|---|---|---|"
  local model fail=0
  for model in lr fm mvm; do
    : >"$W/x"; : >"$W/m"
    for r in $(seq "$ROUNDS"); do
      theirs "$model" small "$SMALL_EPOCHS" >>"$W/x"
      SERVER_SEED=$r theirs "$model" small "$SMALL_EPOCHS" mixed >>"$W/m"
    done
    local ma lo hi
    ma=$(cut -d' ' -f1 "$W/m" | median)
    lo=$(cut -d' ' -f1 "$W/x" | sort -g | head -1)
    hi=$(cut -d' ' -f1 "$W/x" | sort -g | tail -1)
    printf "| %s | %s | %s | %s | %s .. %s |\n" "$model" "$(cut -d' ' -f1 "$W/x" | tr '\n' ' ')" \
      "$(cut -d' ' -f1 "$W/m" | tr '\n' ' ')" "$ma" "$lo" "$hi"
    if (($(echo "$ma < $lo - 0.02 || $ma > $hi + 0.02" | bc -l))); then fail=1; fi
  done
  if [ $fail = 1 ]; then
    echo "FAIL: a median AUC on our servers lies outside xflow's own range (±0.02)" >&2
    return 1
  fi
  echo "xflow's workers reach the AUC they reach on their own servers (medians within xflow's range ±0.02)"
}

export SERVER_SEED=1
case $what in
  versus) versus ;;
  workers) workers ;;
  all) versus; workers ;;
  *) echo "usage: XFLOW_BUILD=DIR $0 [versus|workers|all]" >&2; exit 2 ;;
esac
