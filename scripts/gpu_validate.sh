#!/usr/bin/env bash
# Runs on the device machine (the device tool's `run`, carrying .gpu-bundle from
# scripts/gpu_bundle.sh), one stage per call so that each fits the tool's 10-minute limit:
#
#   tests     the gpu-labelled tests (CUDA model vs the CPU engine, NumPy and transformers)
#   memcheck  the same tests under compute-sanitizer --tool memcheck
#   bench     an 8B-shaped bf16 model, pdserve-bench engine --backend=cuda, and PyTorch beside it
#   transfer  the offload path on the GPU (staged KV): pdserve-bench transfer --backend=cuda
#   interference  the GPU step-time calibration: pdserve-bench interference --backend=cuda
#
# Results go to $OUT (the device tool's folder that comes back): summaries and logs.
# Usage: scripts/gpu_validate.sh tests|memcheck|bench|transfer|interference
set -uo pipefail
stage=${1:?usage: gpu_validate.sh tests|memcheck|bench|transfer|interference}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/pdserve-gpu-out}
mkdir -p "$out" /tmp/pdserve-gpu
tar -C /tmp/pdserve-gpu -xJf "$root/.gpu-bundle/bundle.tar.xz"
bin=/tmp/pdserve-gpu/bin
export LD_LIBRARY_PATH=/tmp/pdserve-gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PDSERVE_SOURCE_DIR=$root
export PDSERVE_TEST_MODELS_DIR=/tmp/pdserve-gpu/test-models
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/device.txt" 2>&1

case "$stage" in
  tests)
    "$bin/engine_cuda_kernels_test" --gtest_output="json:$out/gpu_tests.json" >"$out/gpu_tests.log" 2>&1
    echo "rc=$?" >>"$out/gpu_tests.log"
    tail -40 "$out/gpu_tests.log"
    ;;
  memcheck)
    compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/engine_cuda_kernels_test" \
      --gtest_filter='-*HuggingFace*:*NumpyReference*' >"$out/memcheck.log" 2>&1
    echo "rc=$?" >>"$out/memcheck.log"
    tail -30 "$out/memcheck.log"
    ;;
  bench)
    model=/tmp/pdserve-gpu/models/8b
    [ -f "$model/config.json" ] || "$bin/pdserve-make-model" --preset=8b --out="$model"
    "$bin/pdserve-bench" engine --backend=cuda --model="$model" --out="$out/engine-8b" \
      --decode_batches=1,2,4,8,16,32,64 --prefill_tokens=512,2048 2>&1 | tee "$out/engine-8b.log"
    python3 "$root/bench/engine/torch_engine_bench.py" --model="$model" --out="$out/torch-8b" \
      2>&1 | tee "$out/torch-8b.log"
    ;;
  transfer | interference)
    model=/tmp/pdserve-gpu/models/small
    [ -f "$model/config.json" ] || "$bin/pdserve-make-model" --preset=small --out="$model"
    if [ "$stage" = transfer ]; then
      "$bin/pdserve-bench" transfer --backend=cuda --model="$model" --out="$out/transfer" \
        --prompt_lengths=512,2048,8192 2>&1 | tee "$out/transfer.log"
    else
      "$bin/pdserve-bench" interference --backend=cuda --model="$model" \
        --out="$out/interference" 2>&1 | tee "$out/interference.log"
    fi
    ;;
  *)
    echo "unknown stage: $stage" >&2
    exit 2
    ;;
esac
