# Sourced by the emulated-cluster scripts beside it (run from the repository root): the
# binaries, the H100 + Llama 3 8B profile, and Llama 3 8B's shape without weights in
# models/llama3-8b-emulated (made on first use).
bin=build/bin
profile=deploy/profiles/h100-llama3-8b.json
model=models/llama3-8b-emulated
[[ -f $model/config.json ]] ||
  "$bin/pdserve-make-model" --preset=8b --weights=false --max_position_embeddings=131072 \
    --out="$model" > /dev/null
