#!/usr/bin/env bash
# Smoke run of `pdserve-bench fleet` with a handful of emulated workers (seconds): every figure
# of summary.json is there, the footprint and the kill are measured, and no request failed.
set -euo pipefail
bench=$1
source_dir=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$out"
"$bench" fleet --out="$out/fleet" --workers=4 --idle_window=2s --fleet_requests=100 \
  --profile="$source_dir/deploy/profiles/h100-llama3-8b.json" > "$out/stdout.txt" 2> "$out/stderr.txt" \
  || { cat "$out/stderr.txt"; exit 1; }
python3 - "$out/fleet/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for key in ("registration_all_s", "idle_worker_rss_mb_median", "idle_worker_cpu_percent_median",
            "router_idle_rss_mb", "decision_p50_us", "decision_p99_us", "relay_itl_overhead",
            "kill_removed_ms", "targets"):
    assert key in s, key
assert s["workers"] == 4, s["workers"]
assert s["decisions_recorded"] == 100, s["decisions_recorded"]
assert s["decision_requests_failed"] == 0, s
assert 0 < s["idle_worker_rss_mb_median"] < 1024, s["idle_worker_rss_mb_median"]
assert s["kill_removed_ms"] >= 0, "the killed worker never left the registry"
PY
echo "fleet smoke: ok"
