#!/usr/bin/env bash
# The robustness gate: `pdserve-sim family` plans the smoke cells of the workload family at
# 8 GPUs (H100 + Llama 3 8B profile) and fails if cost_model's goodput falls below 0.95x the
# best fixed policy's in any of them; its summary, CSV and plot are written; bad flags fail
# with a message naming them. (The whole family: sim/run_family.sh.)
# Usage: sim_family_test.sh PDSERVE_SIM SOURCE_DIR
set -euo pipefail
sim=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
profile=$src/deploy/profiles/h100-llama3-8b.json

"$sim" family --profile "$profile" --cells smoke --requests 300 --slo_ttft 2000 --slo_tpot 25 \
  --thresholds 512,2048 --bisect_steps 3 --split_step 2 --jobs 2 --warmup_s 5 --measure_s 20 \
  --cooldown_s 5 --min_ratio 0.95 --out "$out/family" > "$out/family.txt" 2> "$out/family.err" \
  || { cat "$out/family.txt" "$out/family.err"; exit 1; }
cat "$out/family.txt"
grep -q "^worst cell: " "$out/family.txt"
python3 - "$out/family/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
cells = s["cells"]
assert len(cells) == 4, len(cells)
for c in cells:
    assert c["gpus"] == 8, c
    assert c["cost_model"].startswith("cost_model"), c
    assert c["best_fixed"] and not c["best_fixed"].startswith("cost_model"), c
    assert c["cost_model_over_best_fixed"] > 0, c
assert s["family_worst_cost_model_over_best_fixed"] == min(c["cost_model_over_best_fixed"] for c in cells), s
PY
[ "$(wc -l < "$out/family/family.csv")" -eq 5 ] || { echo "FAIL: family.csv rows"; exit 1; }
if command -v gnuplot > /dev/null; then
  [ -s "$out/family/family.png" ] || { echo "FAIL: no family.png"; exit 1; }
fi

if "$sim" family --profile "$profile" --cells long/tiny/none 2> "$out/err"; then
  echo "FAIL: a malformed cell was accepted"; exit 1
fi
grep -q "prompt/output/sharing/arrivals" "$out/err"
if "$sim" family --profile "$profile" --cells long/huge/none/poisson 2> "$out/err"; then
  echo "FAIL: an unknown output shape was accepted"; exit 1
fi
grep -q "output 'huge'" "$out/err"
if "$sim" family --profile "$profile" --policies cost_model 2> "$out/err"; then
  echo "FAIL: a family without a fixed policy was accepted"; exit 1
fi
grep -q -- "--policies" "$out/err"
echo "sim family smoke: OK"
