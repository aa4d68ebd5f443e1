#!/usr/bin/env bash
# CTest fixture: installs the official OpenAI client (npm "openai") into the build tree, for
# openai_front_test's client check. Usage: setup_fixture.sh FIXTURE_DIR
set -euo pipefail
fixture_dir=$1
if [[ -f "$fixture_dir/node_modules/openai/package.json" ]]; then
  exit 0
fi
mkdir -p "$fixture_dir"
npm install --prefix "$fixture_dir" --no-audit --no-fund --silent openai@6.49.0
