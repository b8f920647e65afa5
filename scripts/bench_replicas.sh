#!/usr/bin/env bash
# Measures what replication costs: psbench in jobs of 2 servers (1 and 2
# workers) run alternately without and with PS_REPLICAS=1 (which goes
# first swaps every round), the same binary and the same store; prints, per
# measurement, the cost with replicas over the cost without, round by round:
# the median with its quartiles, next to the baseline's own spread and the
# machine's load (scripts/bench_setting.sh).
#
#   usage: scripts/bench_replicas.sh       (ROUNDS, default 7; AB_OUT keeps the raw lines)
set -euo pipefail
cd "$(dirname "$0")/.."
LAYOUTS="2 1,2 2" exec scripts/bench_setting.sh PS_REPLICAS 0 1
