#!/usr/bin/env bash
# CTest fixture: installs llama3-tokenizer-js into the build tree (never the source tree)
# and writes the tokenizer.json + expected encodings the Llama 3 tokenizer test reads.
# Usage: setup_fixture.sh FIXTURE_DIR
set -euo pipefail
fixture_dir=$1
script_dir=$(cd "$(dirname "$0")" && pwd)
if [[ -f "$fixture_dir/out/cases.json" && -f "$fixture_dir/out/tokenizer.json" ]]; then
  exit 0
fi
mkdir -p "$fixture_dir"
if [[ ! -d "$fixture_dir/node_modules/llama3-tokenizer-js" ]]; then
  npm install --prefix "$fixture_dir" --no-audit --no-fund --silent llama3-tokenizer-js@1.2.0
fi
node "$script_dir/make_fixture.mjs" "$fixture_dir/node_modules" "$fixture_dir/out"
