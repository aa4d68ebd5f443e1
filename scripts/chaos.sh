#!/bin/bash
# The long chaos run of issue "chaos across hosts": pdserve-bench chaos for DURATION (30m) on
# the tiny model, faults every INTERVAL (5s); the summary goes to OUT (chaos-30m/). Its table
# and fault count are recorded in bench/README.md. CI runs 60 s (ctest -R chaos_60s, and
# chaos_netns_60s where it runs as root).
# NETNS=1 runs it across hosts (a network namespace per process, mTLS, partitions, loss and
# 100 Mbit/s links among the faults; needs root).
# Usage: [NETNS=1] scripts/chaos.sh [DURATION=30m] [OUT=chaos-30m] [INTERVAL=5s] [SEED=7]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-30m}
OUT=${2:-chaos-30m}
INTERVAL=${3:-5s}
SEED=${4:-7}
NETNS_FLAG=()
[[ ${NETNS:-0} == 1 ]] && NETNS_FLAG=(--netns)
BENCH=build/bin/pdserve-bench
[[ -x $BENCH ]] || { echo "build first: $BENCH is missing" >&2; exit 1; }
exec "$BENCH" chaos "${NETNS_FLAG[@]}" --duration="$DURATION" --fault_interval="$INTERVAL" \
  --chaos_seed="$SEED" --clients=4 --out="$OUT"
