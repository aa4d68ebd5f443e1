#!/usr/bin/env bash
# Configures and builds pdserve with CMake + Ninja (+ ccache when present).
# Usage: scripts/build.sh [release|demo|image|sanitize|tsan|arm64] [extra cmake args...]
#   release  (default) -> build/        RelWithDebInfo, -Werror
#   demo               -> build-demo/   what scripts/demo.sh runs, and only that: Release (no
#                                       debug info), no tests, benchmarks or CUDA backend
#   image              -> build-image/  the shipped binaries only (no tests, no benchmarks):
#                                       what deploy/docker/Dockerfile builds
#   sanitize           -> build-asan/   clang, Debug, ASan + UBSan, -Werror: the unit tests and
#                                       the fuzz targets (libFuzzer's coverage on every library),
#                                       the lock annotations checked as errors (-Wthread-safety)
#   tsan               -> build-tsan/   ThreadSanitizer: the server binaries and the stress test
#   arm64              -> build-arm64/  the engine and its tests cross-compiled for 64-bit Arm
#                                       (scripts/install_deps.sh --arm64); ctest runs them under
#                                       qemu-user
set -euo pipefail
cd "$(dirname "$0")/.."

flavor=${1:-release}
targets=()
shift || true
# Line tables only (-g1) in the optimised builds: backtraces, sanitizer reports and perf keep
# file:line and function names; locals and types, which only a debugger wants, are dropped.
# GCC compiles about a fifth faster for it (relay_call.cc: 7.0 s with -g, 5.5 s with -g1).
# For a debugger: scripts/build.sh release -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG".
line_tables=(-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
             -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

case "$flavor" in
  release)
    dir=build
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "${line_tables[@]}" -DPDSERVE_WERROR=ON)
    ;;
  demo)
    dir=build-demo
    args=(-DCMAKE_BUILD_TYPE=Release -DPDSERVE_BUILD_TESTS=OFF -DPDSERVE_BUILD_BENCH=OFF -DPDSERVE_BUILD_SIM=OFF
          -DPDSERVE_CUDA=OFF)
    targets=(pdserve-router pdserve-decode pdserve-prefill pdserve-kv-probe pdserve-make-model
             pdctl)
    ;;
  image)
    dir=build-image
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDSERVE_WERROR=ON -DPDSERVE_BUILD_TESTS=OFF
          -DPDSERVE_BUILD_BENCH=OFF -DPDSERVE_BUILD_SIM=OFF)
    targets=(pdserve-router pdserve-decode pdserve-prefill pdserve-kv-probe pdserve-make-model
             pdctl)
    ;;
  sanitize)
    dir=build-asan
    # One clang build serves three checks that each compiled the libraries once before: the
    # unit tests under the sanitizers, the fuzzers (which need clang, and take the same
    # sanitizers), and the lock annotations. No CUDA, no benchmarks.
    compiler=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
    args=("${compiler[@]}" -DCMAKE_BUILD_TYPE=Debug -DPDSERVE_WERROR=ON -DPDSERVE_SANITIZE=ON
          -DPDSERVE_FUZZ=ON -DPDSERVE_THREAD_SAFETY=ON -DPDSERVE_CUDA=OFF
          -DPDSERVE_BUILD_BENCH=OFF -DPDSERVE_BUILD_SIM=OFF)
    targets=(pdserve_unit_tests pdserve_fuzzers)
    # A tree configured with another compiler (GCC, before) cannot change it in place.
    if [[ -f "$dir/CMakeCache.txt" ]] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang' "$dir/CMakeCache.txt"; then
      rm -rf "$dir"
    fi
    ;;
  tsan)
    dir=build-tsan
    scripts/fetch_abseil_source.sh "$dir/abseil-src"
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "${line_tables[@]}" -DPDSERVE_WERROR=ON -DPDSERVE_TSAN=ON
          -DPDSERVE_CUDA=OFF -DPDSERVE_BUILD_BENCH=OFF -DPDSERVE_BUILD_SIM=OFF -DPDSERVE_TSAN_ABSEIL_SOURCE="$PWD/$dir/abseil-src")
    targets=(pdserve-router pdserve-decode pdserve-prefill pdserve-kv-probe fault_router_test)
    ;;
  arm64)
    dir=build-arm64
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "${line_tables[@]}" -DPDSERVE_WERROR=ON -DPDSERVE_ENGINE_ONLY=ON
          -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake")
    ;;
  *)
    echo "usage: $0 [release|demo|image|sanitize|tsan|arm64] [cmake args...]" >&2
    exit 2
    ;;
esac

# Configured once; again whenever extra cmake args are given (they would be ignored otherwise).
if [[ ! -f "$dir/build.ninja" || $# -gt 0 ]]; then
  cmake -S . -B "$dir" -G Ninja "${launcher[@]}" "${args[@]}" "$@"
fi
cmake --build "$dir" ${targets:+--target "${targets[@]}"}
