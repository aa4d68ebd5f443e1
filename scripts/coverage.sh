#!/usr/bin/env bash
# Line coverage of the unit tests alone (ctest -L unit) with gcovr: builds build-cov/ (Debug,
# --coverage, no CUDA, no benchmarks), runs the unit tests and prints a per-file table.
# Usage: scripts/coverage.sh [gcovr --filter regex ...]   e.g. scripts/coverage.sh 'decode_worker/'
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-cov
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
command -v gcovr >/dev/null || { echo "coverage: gcovr missing (apt install gcovr)" >&2; exit 1; }
if [[ ! -f "$dir/build.ninja" ]]; then
  cmake -S . -B "$dir" -G Ninja "${launcher[@]}" -DCMAKE_BUILD_TYPE=Debug -DPDSERVE_CUDA=OFF \
    -DPDSERVE_BUILD_BENCH=OFF -DPDSERVE_BUILD_SIM=OFF -DCMAKE_CXX_FLAGS=--coverage -DCMAKE_C_FLAGS=--coverage \
    -DCMAKE_EXE_LINKER_FLAGS=--coverage -DCMAKE_SHARED_LINKER_FLAGS=--coverage
fi
cmake --build "$dir"
find "$dir" -name '*.gcda' -delete
(cd "$dir" && ctest -L unit -j "$(nproc)" --output-on-failure --timeout 900)
filters=()
for f in "$@"; do filters+=(--filter "$f"); done
[[ ${#filters[@]} -gt 0 ]] || filters=(--filter '(common|engine|kvtransfer|decode_worker|prefill_worker|router|tools)/')
gcovr -r . --object-directory "$dir" "${filters[@]}" --exclude '.*_test\.cc' --exclude 'build.*/' \
  --print-summary --txt - | grep -v '^-*$'
