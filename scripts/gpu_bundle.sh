#!/usr/bin/env bash
# Packs what a GPU session runs on the device machine, which has CUDA 13, PyTorch and
# transformers but none of our Debian libraries: an sm_90 Release build of the GPU test binary,
# the benchmark and the model maker, stripped, with every shared library they load except glibc
# and the CUDA driver, in .gpu-bundle/bundle.tar.xz (about 15 MB: under the device tool's
# 64 MiB carry limit). Then, on the device: scripts/gpu_validate.sh (carry .gpu-bundle).
#
# Usage: scripts/gpu_bundle.sh            (build dir: build-gpu, or $BUILD_DIR)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
binaries=(engine_cuda_kernels_test pdserve-bench pdserve-make-model pdserve-generate
  pdserve-decode pdserve-prefill pdserve-router pdserve-kv-probe)

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPDSERVE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
ninja -C "$build" "${binaries[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in "${binaries[@]}"; do
  strip -o "$stage/bin/$b" "$build/bin/$b"
done
# Every library the binaries load, but glibc's own and the driver's (the device has those).
for b in "${binaries[@]}"; do ldd "$build/bin/$b"; done |
  awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|libcuda)\.so|/ld-linux' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
mkdir -p "$root/.gpu-bundle"
tar -C "$stage" -cJf "$root/.gpu-bundle/bundle.tar.xz" bin lib
echo "wrote $root/.gpu-bundle/bundle.tar.xz ($(du -h "$root/.gpu-bundle/bundle.tar.xz" | cut -f1))"
