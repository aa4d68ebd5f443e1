#!/usr/bin/env bash
# README command (a): install what is missing, build, and run the main job: a local cluster
# (router + 1 prefill worker + 2 decode workers, deploy/local/cluster.yaml) on the embedded
# default model (generated into models/tiny on first use), serving a short prompt, a long
# cold prompt next to running decodes, a follow-up turn of the first conversation, and a chat
# through the OpenAI-compatible HTTP API. Each request prints its text and the router's
# placement decision with its reason; the cluster
# status and the metrics endpoints follow; then the cluster stops. The default model has
# seeded random weights (no weights can be downloaded here), so its text is gibberish: what
# the demo shows is the serving system.
set -euo pipefail
cd "$(dirname "$0")/.."
# One line per stage: the first run spends minutes in the first two.
echo "== installing what is missing to build and run it (scripts/install_deps.sh --build)"
start=$SECONDS
scripts/install_deps.sh --build
echo "   installed in $((SECONDS - start)) s"
echo "== building the router, the workers and pdctl (scripts/build.sh demo: build-demo/; the"
echo "   tests, benchmarks and CUDA backend are built by the test command, scripts/build.sh release)"
start=$SECONDS
scripts/build.sh demo >/dev/null
echo "   built in $((SECONDS - start)) s"
pdctl=build-demo/bin/pdctl
config=deploy/local/cluster.yaml

background=()
stop_background=$(mktemp -u)
# Ends the background streams: their loops see the file and stop starting new ones; the stream
# each is running is killed (again, until the loop is gone).
stop_streams() {
  touch "$stop_background"
  for pid in "${background[@]+"${background[@]}"}"; do
    while kill -0 "$pid" 2>/dev/null; do
      pkill -P "$pid" 2>/dev/null || true
      sleep 0.1
    done
  done
  background=()
  rm -f "$stop_background"
}
cleanup() {
  stop_streams
  "$pdctl" down -f "$config" >/dev/null 2>&1 || true
}
trap cleanup EXIT

"$pdctl" down -f "$config" >/dev/null 2>&1 || true  # A cluster left over from an interrupted run.
echo "== pdctl up -f $config"
"$pdctl" up -f "$config"

turn1="You are a helpful assistant for llama farmers. A farmer writes: my llama has stopped eating \
its hay and spends the day standing by the fence. What should I check first?"
echo
echo "== 1. a short prompt (first turn of a conversation)"
info=$(mktemp)
answer1=$("$pdctl" generate -f "$config" --prompt="$turn1" --max_tokens=64 --temperature=0 2>"$info")
echo "$answer1"
cat "$info"
rm -f "$info"

echo
echo "== 2. a long cold prompt while four other requests are decoding"
# Each background stream starts again when it ends: on a fast machine 4,000 tokens of the tiny
# model take about a second, and the long prompt must find streams decoding on both workers
# (two each, so that one between its restarts leaves another).
for i in 1 2 3 4; do
  while [ ! -e "$stop_background" ]; do
    "$pdctl" generate -f "$config" --prompt="Background stream $i: count the llamas in the field." \
      --max_tokens=4000 --ignore_eos --quiet 2>/dev/null || break
  done &
  background+=($!)
done
# Until both decode workers report running some (at most 10 s).
for _ in $(seq 1 100); do
  busy=$("$pdctl" status -f "$config" 2>/dev/null |
    awk '$2 == "decode" && $4 >= 1 {n++} END {print n + 0}')
  [ "$busy" -ge 2 ] && break
  sleep 0.1
done
long=""
for i in $(seq 1 35); do
  long+="Record $i: the herd moved from pasture $((i * 7 % 13)) to pasture $((i * 5 % 11)) and ate $((i * 3)) bales. "
done
"$pdctl" generate -f "$config" --prompt="$long Summarise the records." --max_tokens=16 --temperature=0 >/dev/null
stop_streams
wait 2>/dev/null || true

echo
echo "== 3. the follow-up turn of the first conversation (its prefix is cached on one decode worker)"
"$pdctl" generate -f "$config" --prompt="$turn1$answer1 Thanks. And if it also has a fever?" --max_tokens=32 \
  --temperature=0

echo
echo "== 4. a chat through the OpenAI-compatible HTTP API (what OpenAI SDKs and benchmark tools speak)"
curl -sS --max-time 60 http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model": "tiny", "messages": [{"role": "user", "content": "Which llama is the oldest?"}],
       "max_tokens": 24, "temperature": 0}' |
  python3 -c 'import json, sys
r = json.load(sys.stdin)
if "error" in r: sys.exit("error: " + r["error"]["message"])
p = r["pdserve"]["placement"]
print(r["choices"][0]["message"]["content"])
print("[placement: %s on %s (%s); %d prompt tokens from the chat template]" % (
    p["mode"], p["decode_worker"], p["reason"], r["usage"]["prompt_tokens"]))'

echo
echo "== pdctl status"
"$pdctl" status -f "$config" --decisions=6
echo
echo "== pdctl down"
"$pdctl" down -f "$config"
trap - EXIT
