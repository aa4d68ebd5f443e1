#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each for a short while from
# the seed corpora in tests/fuzz/seeds. Usage: scripts/fuzz.sh [seconds per target, default 20]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
if [[ ! -f build-fuzz/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPDSERVE_FUZZ=ON -DPDSERVE_CUDA=OFF -DPDSERVE_BUILD_TESTS=OFF -DPDSERVE_BUILD_BENCH=OFF -DPDSERVE_BUILD_SIM=OFF >/dev/null
fi
cmake --build build-fuzz --target safetensors_header_fuzzer tokenizer_json_fuzzer rpc_request_fuzzer \
  openai_request_fuzzer jinja_template_fuzzer
run() {
  local name=$1 seeds=$2
  local corpus=build-fuzz/corpus/$name
  mkdir -p "$corpus"
  echo "== fuzzing $name for ${seconds}s =="
  build-fuzz/bin/"$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$corpus" "$seeds" 2>&1 | tail -n 6
}
run safetensors_header_fuzzer tests/fuzz/seeds/safetensors
run tokenizer_json_fuzzer tests/fuzz/seeds/tokenizer
run rpc_request_fuzzer tests/fuzz/seeds/rpc
run openai_request_fuzzer tests/fuzz/seeds/openai
run jinja_template_fuzzer tests/fuzz/seeds/jinja
