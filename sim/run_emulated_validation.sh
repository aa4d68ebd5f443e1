#!/usr/bin/env bash
# The simulator's fidelity against an emulated 8-GPU cluster of real processes (issue:
# emulated accelerators; bench/README.md `sim`). For each trace window, RUNS times: the serve
# bench replays it on 3 prefill + 5 decode emulated H100s (Llama 3 8B, TTFT 2 s, TPOT 25 ms)
# for cost_model and length_threshold at four rates (three below the knee, one above), then
# pdserve-sim validate simulates the same requests on the same profile and cluster. Mooncake
# runs at the profile's own speed; Azure (211 output tokens a request at ~190 requests/s at
# its knee: 40,000 tokens/s, more than this 2-core machine's load generator and relay can
# carry) on the profile slowed down 8x (--time_scale 8: the same cluster's dynamics at an
# eighth of the rate). Every run replays the same requests (one seed): the spread is the
# system's, not the workload's.
#
# The objectives are the profile's hardware's; with --time_scale the serve bench scales them
# with the times (an 8x slower machine is held to 16 s and 200 ms).
#
# Usage: sim/run_emulated_validation.sh [OUT_DIR] [RUNS] [TRACES]   (~40 minutes for 3
# runs of both; TRACES: "mooncake azure" by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench-out/emulated-validation}
runs=${2:-3}
traces=${3:-mooncake azure}
# shellcheck source=sim/emulated_env.sh
source sim/emulated_env.sh
common=(--model="$model" --backend=emulated --profile="$profile" --prefill_workers=3
        --decode_workers=5 --slo_ttft_ms=2000 --slo_tpot_ms=25
        --policies=cost_model,length_threshold --requests_per_rate=120 --probe_repetitions=0
        --bisect_steps=0 --cpus= --trace_start=600 --trace_duration=600)
declare -A args=(
  [mooncake]="--trace=bench/traces/mooncake_fast25_conversation.jsonl --length_threshold=8192 --rates_per_s=2,4,6,10 --time_scale=1"
  [azure]="--trace=bench/traces/azure_llm_2023_conv.csv --length_threshold=1024 --rates_per_s=6,12,18,30 --time_scale=8"
)
for trace in $traces; do
  for run in $(seq 1 "$runs"); do
    dir="$out/$trace-$run"
    mkdir -p "$dir/runs/trace"
    # The unloaded pass (RPC calibration) is the same requests every run: measured once.
    if [[ $run -gt 1 && -f "$out/$trace-1/runs/trace/unloaded.json" ]]; then
      cp "$out/$trace-1/runs/trace/unloaded.json" "$dir/runs/trace/"
    fi
    # shellcheck disable=SC2086
    "$bin/pdserve-bench" serve --out="$dir" "${common[@]}" ${args[$trace]} > "$dir.serve.txt" 2>&1
    "$bin/pdserve-sim" validate --profile="$profile" --serve_dir="$dir" --out="$dir-validate" \
      > "$dir.validate.txt" 2>&1
    tail -n 12 "$dir.validate.txt"
  done
done
