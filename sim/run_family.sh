#!/usr/bin/env bash
# The whole workload family (72 synthetic cells) and both traces, planned at 8 and 32 GPUs on
# the H100 + Llama 3 8B profile: cost_model against the best fixed policy in every cell, the
# figures bench/README.md (sim, robustness) quotes. CI runs the 4 smoke cells only
# (tests/sim/sim_family_test.sh). Hours on a 2-core machine: --jobs uses more cores.
# Usage: [SIM=BINARY] sim/run_family.sh OUT_DIR [extra pdserve-sim flags]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: sim/run_family.sh OUT_DIR [flags]}
shift
sim=${SIM:-build/bin/pdserve-sim}  # SIM=: a copied binary, so that rebuilding does not change a long run
profile=deploy/profiles/h100-llama3-8b.json
common=(--profile "$profile" --slo_ttft 2000 --slo_tpot 25 --requests 400 --bisect_steps 4
        --jobs "$(nproc)")
# 8 GPUs: every split; 32: every 4th, then every split between the best one's neighbours, on
# a shorter steady state (as the 32-GPU trace plans).
"$sim" family "${common[@]}" --cells full --family_gpus 8 --thresholds 512,1024,2048,4096 \
  --family_traces bench/traces/azure_llm_2023_conv.csv,bench/traces/mooncake_fast25_conversation.jsonl \
  --trace_start 600 --trace_duration 600 --out "$out/gpus8" "$@"
"$sim" family "${common[@]}" --cells full --family_gpus 32 --thresholds 1024,2048,4096 \
  --split_step 4 --warmup_s 10 --measure_s 30 --cooldown_s 10 \
  --family_traces bench/traces/azure_llm_2023_conv.csv,bench/traces/mooncake_fast25_conversation.jsonl \
  --trace_start 600 --trace_duration 600 --out "$out/gpus32" "$@"
