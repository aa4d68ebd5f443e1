#!/usr/bin/env bash
# Builds the libFuzzer targets in the sanitizer build (scripts/build.sh sanitize: clang, ASan +
# UBSan) and runs each for a short while from the seed corpora in tests/fuzz/seeds.
# Usage: scripts/fuzz.sh [seconds per target, default 20]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
if [[ -f build-asan/build.ninja ]] && grep -q '^CMAKE_CXX_COMPILER:.*clang' build-asan/CMakeCache.txt; then
  cmake --build build-asan --target pdserve_fuzzers
else
  scripts/build.sh sanitize
fi
run() {
  local name=$1 seeds=$2
  local corpus=build-asan/corpus/$name
  mkdir -p "$corpus"
  echo "== fuzzing $name for ${seconds}s =="
  build-asan/bin/"$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$corpus" "$seeds" 2>&1 | tail -n 6
}
run safetensors_header_fuzzer tests/fuzz/seeds/safetensors
run tokenizer_json_fuzzer tests/fuzz/seeds/tokenizer
run rpc_request_fuzzer tests/fuzz/seeds/rpc
run openai_request_fuzzer tests/fuzz/seeds/openai
run jinja_template_fuzzer tests/fuzz/seeds/jinja
