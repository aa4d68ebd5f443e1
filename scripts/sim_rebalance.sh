#!/bin/bash
# The live-rebalancing figures of bench/README.md (sim, workloads whose regime changes), on the
# H100 / Llama 3 8B profile at 8 GPUs: for each configuration the largest rate multiple at which
# every phase keeps 90 % attainment, found by bisection (virtual time: deterministic, the same
# on every machine).
#   WORKLOAD=shift (default): long prompts with tiny outputs, chat with long answers, the first
#     again (10 minutes each).
#   WORKLOAD=swing: one workload (chat prompts, ~100-token answers) at 1x, 3x and 1x its rate,
#     6,000 s each at rate multiple 1 (about a minute each at the knee, as the shift's phases;
#     a rate multiple compresses the schedule's time): the rate swing.
#   WORKLOAD=classes: the shifting mix with two SLO classes in one stream (interactive: TTFT
#     1 s, TPOT 25 ms; batch: TTFT 10 s, TPOT 100 ms; half each), 90 % needed in each class.
#   PHASE_S=N: every phase lasts N seconds (virtual) at every rate multiple. By default a rate
#     multiple compresses the schedule as it does a trace (each phase at the knee lasts about a
#     minute); with PHASE_S the phases last as long at every rate, as a shift on the clock
#     does (more requests: runs take longer).
#   ONLY=REGEX: only the configurations whose names match (e.g. ONLY='from 4P:4D').
# Usage: [WORKLOAD=shift|swing|classes] [PHASE_S=N] [ONLY=REGEX] scripts/sim_rebalance.sh
#        [extra pdserve-sim flags]
set -euo pipefail
cd "$(dirname "$0")/.."
SIM=${SIM:-build/bin/pdserve-sim}  # SIM=another/binary compares two builds.
WORKLOAD=${WORKLOAD:-shift}
EXTRA=()
case "$WORKLOAD" in
  shift | classes)
    SCHEDULE="long/tiny/none/poisson@12:600,short/long/none/poisson@6.4:600,long/tiny/none/poisson@12:600"
    MEAN_RATE=$(awk 'BEGIN {print (12 + 6.4 + 12) / 3}')
    LO=4 HI=12
    if [[ $WORKLOAD == classes ]]; then
      EXTRA=(--slo_classes interactive:1000:25:0.5,batch:10000:100:0.5)
    fi
    ;;
  swing)
    SCHEDULE="short/medium/none/poisson@2:6000,short/medium/none/poisson@6:6000,short/medium/none/poisson@2:6000"
    MEAN_RATE=$(awk 'BEGIN {print (2 + 6 + 2) / 3}')
    LO=60 HI=180
    ;;
  *)
    echo "WORKLOAD: shift, swing or classes, not $WORKLOAD" >&2
    exit 2
    ;;
esac
BASE=(--profile deploy/profiles/h100-llama3-8b.json --slo_ttft 2000 --slo_tpot 25 "${EXTRA[@]}")
PHASE_S=${PHASE_S:-}

# The schedule run at rate multiple $1: as written, or with PHASE_S each phase's duration
# stretched by the multiple (which then compresses it back to PHASE_S).
schedule_at() {
  if [[ -z $PHASE_S ]]; then
    echo "$SCHEDULE"
  else
    awk -v s="$SCHEDULE" -v d="$PHASE_S" -v m="$1" 'BEGIN {
      n = split(s, phases, ","); out = ""
      for (i = 1; i <= n; ++i) {
        sub(/:[0-9.]+$/, sprintf(":%.0f", d * m), phases[i])
        out = out (i > 1 ? "," : "") phases[i]
      }
      print out }'
  fi
}

# Minimum attainment of one run at rate multiple $1: over its phases, and with classes over
# each class (a class's attainment is over the whole run).
min_phase() {
  local rate=$1
  shift
  "$SIM" run "${BASE[@]}" --schedule "$(schedule_at "$rate")" --rate "$rate" "$@" 2>/dev/null |
    awk '/^(phase|class)/ {print $4}' | sort -n | head -1
}

# The knee: bisection between a passing and a failing rate multiple.
knee() {
  local lo=$LO hi=$HI
  for _ in 1 2 3 4 5 6 7; do
    local mid
    mid=$(awk -v a="$lo" -v b="$hi" 'BEGIN {printf "%.4f", (a + b) / 2}')
    if awk -v m="$(min_phase "$mid" "$@")" 'BEGIN {exit !(m >= 0.9)}'; then
      lo=$mid
    else
      hi=$mid
    fi
  done
  echo "$lo"
}

echo "workload $WORKLOAD: $SCHEDULE ${EXTRA[*]}${PHASE_S:+ (each phase ${PHASE_S} s at every rate)}"
printf "%-58s %8s %14s\n" "configuration" "knee" "goodput/GPU"
report() {
  local name=$1
  shift
  [[ -z ${ONLY:-} || $name =~ $ONLY ]] || return 0
  local k
  k=$(knee "$@")
  printf "%-58s %8s %14s\n" "$name" "$k" "$(awk -v k="$k" -v r="$MEAN_RATE" 'BEGIN {printf "%.2f", k * r / 8}')"
}
for split in "4 4" "3 5" "5 3"; do
  read -r d p <<<"$split"
  report "always_offload ${p}P:${d}D (fixed)" --policy always_offload --decode_workers "$d" --prefill_workers "$p" "${@}"
  report "cost_model ${p}P:${d}D (fixed)" --policy cost_model --decode_workers "$d" --prefill_workers "$p" "${@}"
  report "cost_model from ${p}P:${d}D, --rebalance" --policy cost_model --decode_workers "$d" --prefill_workers "$p" --rebalance "${@}"
done
