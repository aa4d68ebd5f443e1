#!/usr/bin/env bash
# Smoke runs of `pdserve-bench interference` and `serve` on the tiny model (seconds): the outputs exist and
# are well formed (per-run JSON, the CSV, a cost_model.json the router loads, summary keys,
# the plots when gnuplot is installed), and a second run resumes instead of measuring again.
# Usage: bench_smoke_test.sh BENCH MODEL_DIR ROUTER MAKE_MODEL [interference|serve|trace|all]
# (CTest runs the three parts as three tests, each with its own timeout: on the portable
# scalar kernels the whole took 230-300 s, too close to one test's limit.)
set -euo pipefail
bench=$1
model=$2
router=$3
make_model=$4
part=${5:-all}
wants() { [[ "$part" == all || "$part" == "$1" ]]; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Say which check failed, with the benchmarks' own words, before the directory goes.
trap 'echo "bench_smoke: failed at line $LINENO: $BASH_COMMAND" >&2; tail -n 20 "$out"/*.err "$out"/stderr*.txt >&2 2> /dev/null' ERR
if [[ ! -f "$model/config.json" ]]; then
  "$make_model" --preset=tiny --out="$model" > /dev/null
fi
if wants interference; then
args=(interference --out="$out" --model="$model" --d=0,1 --p=48,96 --chunks=32 --repetitions=2
      --context_tokens=32 --threads=1)
"$bench" "${args[@]}" > "$out/stdout.txt" 2> "$out/stderr.txt" || { cat "$out/stderr.txt"; exit 1; }
test "$(find "$out/results" -name '*.json' | wc -l)" -eq 8
head -1 "$out/interference_table.csv" | grep -q '^chunk_size,decode_batch_size,new_prefill_tokens,'
test "$(wc -l < "$out/interference_table.csv")" -eq 5
for key in r2_heldout max_cv fit; do grep -q "\"$key\"" "$out/summary.json"; done
grep -q '"per_prefill_token_ms"' "$out/cost_model.json"
# The router refuses a malformed cost model, so starting it with this one checks it loads.
"$router" --model="$model" --cost_model="$out/cost_model.json" --listen=127.0.0.1:0 --metrics_listen= \
  --serving_info_path="$out/router.info" > "$out/router.log" 2>&1 &
router_pid=$!
for _ in $(seq 1 100); do [[ -s "$out/router.info" ]] && break; sleep 0.05; done
kill "$router_pid"; wait "$router_pid" || true
test -s "$out/router.info" || { cat "$out/router.log"; exit 1; }
if command -v gnuplot > /dev/null; then
  test -s "$out/heatmap.png"
  test -s "$out/breakeven.png"
fi
# Resuming measures nothing again.
"$bench" "${args[@]}" > /dev/null 2> "$out/stderr2.txt"
grep -q "8 runs resumed" "$out/stderr2.txt" || { cat "$out/stderr2.txt"; exit 1; }
echo "interference smoke: ok"
fi

if wants serve; then
# Smoke run of `pdserve-bench serve`: one mix, two policies, one rate, a few requests, prompts
# short enough for the portable (scalar) kernels to serve in seconds.
serve=(serve --out="$out/serve" --model="$model" --mixes=mixed --policies=always_local,cost_model --rates=0.5,4
       --requests_per_rate=6 --probe_repetitions=2 --bisect_steps=1 --max_context=768)
"$bench" "${serve[@]}" > "$out/serve.txt" 2> "$out/serve.err" || { cat "$out/serve.err"; exit 1; }
for key in goodput_cost_model_over_best_fixed tpot_p90_inflation_cost_model tpot_p90_inflation_always_local \
           loadgen_cpu_share slo_ttft_ms; do
  grep -q "\"$key\"" "$out/serve/summary.json" || { echo "summary.json lacks $key"; exit 1; }
done
test -s "$out/serve/runs/mixed/unloaded.json"
test -s "$out/serve/runs/mixed/always_local/rate_0.json"
test -s "$out/serve/runs/mixed/cost_model/rate_0.json"
grep -q '"attainment"' "$out/serve/runs/mixed/cost_model/rate_0.json"
# A passing rate followed by a failing one is bisected (one step here); nothing else is.
for policy in always_local cost_model; do
  python3 - "$out/serve/runs/mixed/$policy" <<'PY' || exit 1
import json, os, sys
d = sys.argv[1]
passed = [json.load(open(os.path.join(d, f"rate_{k}.json")))["attainment"] >= 0.9 for k in (0, 1)]
expected = passed[0] and not passed[1]
if os.path.exists(os.path.join(d, "bisect_0.json")) != expected:
    sys.exit(f"{d}: rates passed {passed}, bisect_0.json should {'' if expected else 'not '}exist")
PY
done
grep -q '"repetitions"' "$out/serve/runs/probe_cost_model.json"
if command -v gnuplot > /dev/null; then test -s "$out/serve/mixed.png"; fi
# Resuming starts no cluster.
"$bench" "${serve[@]}" > /dev/null 2> "$out/serve2.err"
if grep -q "starting the" "$out/serve2.err"; then cat "$out/serve2.err"; exit 1; fi
echo "serve smoke: ok"
fi
if wants trace; then
# A trace replay: Mooncake's first requests, lengths scaled to the tiny model (shared prefix
# blocks of 10 tokens), each point measured twice: the runs and goodput's spread are recorded.
traces="$(cd "$(dirname "$0")/../../bench/traces" && pwd)"
"$bench" serve --out="$out/trace" --model="$model" --policies=cost_model --rates=1 \
  --requests_per_rate=6 --probe_repetitions=1 --bisect_steps=0 --repeats=2 \
  --trace="$traces/mooncake_fast25_conversation.jsonl" --trace_length_scale=0.02 --max_context=768 \
  > "$out/trace.txt" 2> "$out/trace.err" || { cat "$out/trace.err"; exit 1; }
grep -q "trace .*mooncake_fast25_conversation.jsonl: 12031 requests selected" "$out/trace.err"
python3 - "$out/trace" <<'PY' || exit 1
import json, os, sys
d = sys.argv[1]
point = json.load(open(os.path.join(d, "runs", "trace", "cost_model", "rate_0.json")))
assert len(point["attainment_runs"]) == 2, point
assert point["attainment"] in point["attainment_runs"], point
summary = json.load(open(os.path.join(d, "summary.json")))
assert "goodput_spread" in summary["trace"], summary["trace"].keys()
assert "trace" in summary["trace"]["slo_ttft_ms"], summary["trace"]["slo_ttft_ms"]
PY
echo "serve trace smoke: ok"
fi
