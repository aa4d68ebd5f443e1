#!/usr/bin/env bash
# The claim on real processes (issue: emulated accelerators): goodput of cost_model against
# the best fixed policy, each at the prefill:decode split and threshold pdserve-sim's planner
# found best at 8 GPUs (bench/README.md `sim`), on an emulated 8-GPU cluster (H100 + Llama 3
# 8B, TTFT 2 s, TPOT 25 ms), RUNS times; then the simulator's goodput for the same sweeps
# (pdserve-sim validate: the same requests, profile, cluster and objectives). Mooncake at the
# profile's own speed; Azure on the profile slowed down 8x (see run_emulated_validation.sh).
#
# REQUESTS (requests per rate point, default 120) and CONFIGS (default all three) may be set
# in the environment: 120 requests at 10 per second are a 12 s burst, which a 2 s TTFT
# objective partly absorbs; 600 come closer to the steady state the planner judges.
#
# Usage: sim/run_emulated_claim.sh [OUT_DIR] [RUNS] [FIRST_RUN]   (~1 hour for 3 runs)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench-out/emulated-claim}
runs=${2:-3}
first_run=${3:-1}
requests=${REQUESTS:-120}
# shellcheck source=sim/emulated_env.sh
source sim/emulated_env.sh
common=(--model="$model" --backend=emulated --profile="$profile" --slo_ttft_ms=2000
        --slo_tpot_ms=25 --requests_per_rate="$requests" --probe_repetitions=0 --bisect_steps=2
        --cpus=
        --trace_start=600 --trace_duration=600)
mooncake=(--trace=bench/traces/mooncake_fast25_conversation.jsonl --time_scale=1
          --rates_per_s=6,8,10,12,14)
azure=(--trace=bench/traces/azure_llm_2023_conv.csv --time_scale=8 --rates_per_s=16,20,24,28,32)
# name | trace args | policy | prefill:decode | length_threshold N
all_configs=(
  "mooncake-cost_model|mooncake|cost_model|3:5|8192"
  "mooncake-length_threshold|mooncake|length_threshold|4:4|8192"
  "azure-both|azure|cost_model,length_threshold|3:5|1024"
)
configs=("${all_configs[@]}")
if [[ -n ${CONFIGS:-} ]]; then
  configs=()
  for c in "${all_configs[@]}"; do [[ " $CONFIGS " == *" ${c%%|*} "* ]] && configs+=("$c"); done
fi
for run in $(seq "$first_run" "$runs"); do
  for c in "${configs[@]}"; do
    IFS='|' read -r name trace policies split threshold <<< "$c"
    dir="$out/$name-$run"
    mkdir -p "$dir/runs/trace"
    if [[ ! -f "$dir/runs/trace/unloaded.json" && -f "$out/$name-1/runs/trace/unloaded.json" ]]; then
      cp "$out/$name-1/runs/trace/unloaded.json" "$dir/runs/trace/"
    fi
    declare -n targs=$trace
    "$bin/pdserve-bench" serve --out="$dir" "${common[@]}" "${targs[@]}" --policies="$policies" \
      --prefill_workers="${split%%:*}" --decode_workers="${split##*:}" \
      --length_threshold="$threshold" > "$dir.serve.txt" 2>&1
    "$bin/pdserve-sim" validate --profile="$profile" --serve_dir="$dir" --out="$dir-validate" \
      > "$dir.validate.txt" 2>&1
    grep -A4 'goodput real' "$dir.validate.txt"
  done
done
