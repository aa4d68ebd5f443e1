#!/bin/bash
# Issue "chaos across hosts", target: 50 prefill workers killed while a layer is in flight over
# UCX's TCP transport, under load, and the decode worker never aborts. Runs the offload test's
# kill scenario (tests/prefill_worker/offload_test.cc) over TCP with KILLS kills in one decode
# worker's life and BUSY busy loops beside it (CPU contention widened UCX 1.13's abort window
# before the sender's greeting closed it: docs/reliability.md).
# Usage: scripts/ucx_kill_stress.sh [KILLS=50] [BUSY=2]   (after scripts/build.sh or a build/)
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${1:-50}
BUSY=${2:-2}
TEST=build/bin/prefill_offload_test
[[ -x $TEST ]] || { echo "build first: $TEST is missing" >&2; exit 1; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq 1 "$BUSY"); do
  (while :; do :; done) &
  pids+=($!)
done
log=$(mktemp)
start=$(date +%s)
if PDSERVE_OFFLOAD_KILLS=$KILLS "$TEST" \
    --gtest_filter='Ucx/OffloadTest.PrefillWorkerKilledWhileALayerIsInFlight*/1' >"$log" 2>&1; then
  result=passed
else
  result=FAILED
fi
aborts=$(grep -c "Assertion" "$log" || true)
echo "$KILLS kills over tcp beside $BUSY busy loops: $result, $aborts UCX assertions, $(( $(date +%s) - start )) s ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
[[ $result == passed ]] || { tail -40 "$log"; exit 1; }
