#!/usr/bin/env bash
# README command (a): install what is missing, build, and run the main job.
# The furthest-along part of pdserve today is the model engine: this generates the
# embedded default model (a seeded random-weight Llama in the real Hugging Face format) on
# first use and streams a completion from it with pdserve-generate. It becomes the local
# cluster demo (router + prefill + decode workers) once those land.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh release >/dev/null
model=models/tiny
if [[ ! -f $model/config.json ]]; then
  build/bin/pdserve-make-model --preset=tiny --out="$model"
fi
echo "== pdserve-generate on $model (engine only; the cluster is not built yet) =="
build/bin/pdserve-generate --model="$model" --prompt="The llama is a domesticated" \
  --max_tokens=24 --temperature=0.8 --seed=7
