#!/usr/bin/env bash
# pdserve-sim end to end: `run` on a trace window twice with the same seed writes byte-identical
# results, warm-up and cool-down unmeasured; `plan` over a small cluster searches every split
# and policy at steady state, stays under the work bound, writes its summary and plot; bad
# flags fail with a message naming them.
# Usage: sim_smoke_test.sh PDSERVE_SIM SOURCE_DIR
set -euo pipefail
sim=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
profile=$src/deploy/profiles/h100-llama3-8b.json
trace=$src/bench/traces/mooncake_fast25_conversation.jsonl

"$sim" --help > "$out/help.txt"
grep -q -- "--profile" "$out/help.txt"

for i in 1 2; do
  "$sim" run --profile "$profile" --trace "$trace" --trace_duration 120 --decode_workers 3 \
    --prefill_workers 1 --step_jitter 0.1 --slo_ttft 1000 --slo_tpot 30 --out "$out/run$i" \
    > "$out/run$i.txt"
done
cmp "$out/run1/requests.csv" "$out/run2/requests.csv"
lines=$(wc -l < "$out/run1/requests.csv")
[ "$lines" -gt 100 ] || { echo "FAIL: only $lines rows in requests.csv"; exit 1; }
grep -q "cost_model" "$out/run1.txt"
# Steady state: warm-up and cool-down requests are simulated but not measured.
head -1 "$out/run1/requests.csv" | grep -q "^request,kind,measured,"
cut -d, -f3 "$out/run1/requests.csv" | sort -u | tr '\n' ' ' | grep -q "0 1 "

"$sim" plan --profile "$profile" --trace "$trace" --trace_duration 120 --gpus 3 \
  --slo_ttft 1000 --slo_tpot 30 --thresholds 1024,4096 --bisect_steps 2 --warmup_s 10 \
  --measure_s 30 --cooldown_s 10 --out "$out/plan" \
  > "$out/plan.txt" 2> "$out/plan.err"
grep -q "^best: " "$out/plan.txt"
grep -q "^work bound: " "$out/plan.txt"
python3 - "$out/plan/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["gpus"] == 3, s["gpus"]
assert set(s["best"]) == {"always_local", "always_offload", "length_threshold", "cost_model"}, s["best"]
# always_local 0P:3D; always_offload 1P:2D, 2P:1D; cost_model also 0P:3D; length_threshold
# at the three splits and two thresholds.
assert len(s["candidates"]) == 1 + 2 + 3 + 6, len(s["candidates"])
assert s["goodput_cost_model_over_best_fixed"] > 0, s["goodput_cost_model_over_best_fixed"]
assert s["goodput_cost_model_over_best_fixed_mooncake_fast25_conversation"] == s["goodput_cost_model_over_best_fixed"], s
assert s["work_bound_over_best_fixed"] >= s["goodput_cost_model_over_best_fixed"], s
bound = s["work_bound"]["per_gpu"]
assert bound > 0, s["work_bound"]
for c in s["candidates"]:
    assert c["goodput_per_gpu"] <= bound, (c, bound)  # Steady state stays under the work alone.
for c in s["candidates"]:
    assert c["decode_workers"] + c["prefill_workers"] == 3, c
    assert c["points"], c
PY
grep -q "9/9" "$out/plan.err"  # The progress bar reached the end.
if command -v gnuplot > /dev/null; then
  [ -s "$out/plan/plan.png" ] || { echo "FAIL: no plan.png"; exit 1; }
fi

if "$sim" run --profile "$profile" --trace "$trace" --decode_workers 0 > /dev/null 2> "$out/err"; then
  echo "FAIL: --decode_workers 0 was accepted"; exit 1
fi
grep -q "decode_workers" "$out/err"
if "$sim" plan --profile "$profile" --trace "$trace" --measure_s 0 2> "$out/err"; then
  echo "FAIL: plan accepted a burst (--measure_s 0)"; exit 1
fi
grep -q "measure_s" "$out/err"
if "$sim" plan --profile /nonexistent.json --trace "$trace" 2> "$out/err"; then
  echo "FAIL: a missing profile was accepted"; exit 1
fi
grep -q "nonexistent" "$out/err"
echo "sim smoke: OK"
