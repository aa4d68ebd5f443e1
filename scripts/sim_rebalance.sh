#!/bin/bash
# The live-rebalancing figure of bench/README.md (sim, workloads whose regime changes): the
# shifting mix (long prompts with tiny outputs, chat with long answers, the first again) on the
# H100 / Llama 3 8B profile at 8 GPUs; for each configuration the largest rate multiple at which
# every phase keeps 90 % attainment, found by bisection (virtual time: deterministic, the same
# on every machine). Usage: scripts/sim_rebalance.sh [extra pdserve-sim flags]
set -euo pipefail
cd "$(dirname "$0")/.."
SIM=build/bin/pdserve-sim
SCHEDULE="long/tiny/none/poisson@12:600,short/long/none/poisson@6.4:600,long/tiny/none/poisson@12:600"
BASE=(--profile deploy/profiles/h100-llama3-8b.json --slo_ttft 2000 --slo_tpot 25
      --schedule "$SCHEDULE")

# Minimum phase attainment of one run.
min_phase() {
  "$SIM" run "${BASE[@]}" "$@" 2>/dev/null | awk '/^phase/ {print $4}' | sort -n | head -1
}

# The knee: bisection between a passing and a failing rate multiple.
knee() {
  local lo=4 hi=12
  for _ in 1 2 3 4 5 6 7; do
    local mid
    mid=$(awk -v a="$lo" -v b="$hi" 'BEGIN {printf "%.4f", (a + b) / 2}')
    if awk -v m="$(min_phase --rate "$mid" "$@")" 'BEGIN {exit !(m >= 0.9)}'; then
      lo=$mid
    else
      hi=$mid
    fi
  done
  echo "$lo"
}

printf "%-58s %8s %14s\n" "configuration" "knee" "goodput/GPU"
report() {
  local name=$1
  shift
  local k
  k=$(knee "$@")
  # The schedule's mean offered rate is (12 + 6.4 + 12) / 3 per second at multiple 1.
  printf "%-58s %8s %14s\n" "$name" "$k" "$(awk -v k="$k" 'BEGIN {printf "%.2f", k * 30.4 / 3 / 8}')"
}
report "always_offload 5P:3D (fixed)" --policy always_offload --decode_workers 3 --prefill_workers 5 "${@}"
report "cost_model 4P:4D (fixed)" --policy cost_model --decode_workers 4 --prefill_workers 4 "${@}"
report "cost_model from 4P:4D, --rebalance" --policy cost_model --decode_workers 4 --prefill_workers 4 --rebalance "${@}"
report "cost_model from 5P:3D, --rebalance" --policy cost_model --decode_workers 3 --prefill_workers 5 --rebalance "${@}"
