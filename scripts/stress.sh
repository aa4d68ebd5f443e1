#!/usr/bin/env bash
# The reliability runs at full length (CI runs them sized down; bench/README.md records the
# results): the 300-stream router load test RUNS times in a row, the ThreadSanitizer stress
# test with 300 streams, and a soak of SOAK_DURATION. Needs the release build (scripts/build.sh)
# and builds the TSan one. Fails on the first failing run.
# Usage: scripts/stress.sh [RUNS=10] [SOAK_DURATION=10m]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
soak=${2:-10m}
out=${STRESS_OUT:-build/stress}
mkdir -p "$out"

echo "== 300 concurrent streams with cancellations, $runs runs in a row =="
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  build/bin/fault_router_test --gtest_filter='*ThreeHundred*' >"$out/load-$i.log" 2>&1 ||
    { echo "run $i FAILED (log: $out/load-$i.log)"; tail -20 "$out/load-$i.log"; exit 1; }
  echo "run $i passed in $(($(date +%s) - start)) s"
done

echo "== ThreadSanitizer: 300 streams, cancellations, a killed decode worker =="
scripts/build.sh tsan
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/scripts/tsan.supp}
PDSERVE_STRESS_STREAMS=300 build-tsan/bin/fault_router_test --gtest_filter='*Stress*:*ThreeHundred*' \
  >"$out/tsan.log" 2>&1 || { echo "TSan stress FAILED (log: $out/tsan.log)"; tail -40 "$out/tsan.log"; exit 1; }
echo "TSan stress passed"

echo "== soak for $soak =="
build/bin/pdserve-bench soak --duration="$soak" --out="$out/soak" --model=build/test-models/tiny
echo "== all stress runs passed =="
