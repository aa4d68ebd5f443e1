#!/usr/bin/env bash
# README command (b) and CI: install what is missing, check the formatting and the folders'
# layers, build with -Werror, run every test (the fault suite and a 60 s soak among them; on an
# AVX-512 machine the multi-process suites once more on the AVX2 kernels), then build with
# clang, ASan+UBSan and the lock annotations as errors (-Wthread-safety) and run the unit tests
# again under the sanitizers, check the annotations of the files that build did not compile,
# build the router and workers with ThreadSanitizer and run the stress test, fuzz each
# libFuzzer target briefly (built in the sanitizer build), and cross-compile the engine for
# 64-bit Arm and run its tests under qemu-user (on x86-64 machines).
# Fails when any step or test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
# Each stage's wall time, printed as it ends and again at the end: CI's budget is ~50 minutes
# from a cold compiler cache on two cores, and this says where it goes.
stage_names=()
stage_seconds=()
stage_start=$SECONDS
stage() {
  if ((${#stage_names[@]} > 0)); then
    stage_seconds+=($((SECONDS - stage_start)))
    echo "-- ${stage_names[-1]}: $((SECONDS - stage_start)) s"
  fi
  stage_start=$SECONDS
  [[ -z "$1" ]] && return
  stage_names+=("$1")
  echo "== $1 =="
}
report_stages() {
  stage ""
  echo "== wall time per stage (total ${SECONDS} s) =="
  for i in "${!stage_seconds[@]}"; do printf '%6d s  %s\n' "${stage_seconds[$i]}" "${stage_names[$i]}"; done
}

stage "install what is missing (scripts/install_deps.sh)"
scripts/install_deps.sh --arm64

stage "formatting (clang-format, .clang-format)"
scripts/check_format.sh
stage "layers (scripts/check_layers.py, docs/architecture.md)"
scripts/check_layers.py
stage "release build (-Werror)"
scripts/build.sh release
stage "all tests"
(cd build && ctest --output-on-failure --no-tests=error -j "$jobs" --timeout 600)
if grep -qw avx512f /proc/cpuinfo; then
  # CI runs on whichever machine it gets: the multi-process suites again on the AVX2 kernels,
  # as a machine without AVX-512 runs them (slower attention; no bound may assume this CPU).
  # Not again: what runs no model forward (the emulated backend) and the 60 s chaos run over
  # network namespaces, whose engine load chaos_60s already runs on the AVX2 path.
  stage "integration and fault suites on the AVX2 path (PDSERVE_MAX_CPU_ISA=avx2)"
  (cd build && PDSERVE_MAX_CPU_ISA=avx2 ctest --output-on-failure --no-tests=error \
     -L 'integration|fault' -E 'Emulated|emulated|chaos_netns' -j "$jobs" --timeout 600)
fi

stage "sanitizer build (clang: ASan + UBSan, the fuzzers, lock annotations as errors)"
scripts/build.sh sanitize
# The lock annotations of every first-party file: the sanitizer build checked those it
# compiled (-DPDSERVE_THREAD_SAFETY=ON); clang checks the rest (binaries' mains, the
# multi-process tests, the simulator, the benchmarks) without building them.
stage "lock annotations of the files the sanitizer build did not compile"
ninja -C build-asan -t commands pdserve_unit_tests pdserve_fuzzers \
  | grep -o -- ' -c [^ ]*\.cc' | awk '{print $2}' > build-asan/thread_safety_checked.txt
scripts/check_thread_safety.sh --skip build-asan/thread_safety_checked.txt build
stage "unit tests under ASan + UBSan"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp}
(cd build-asan && ctest --output-on-failure --no-tests=error -L unit -j "$jobs" --timeout 900)
stage "ThreadSanitizer build: router and workers"
scripts/build.sh tsan
stage "the stress test under ThreadSanitizer"
# Sized down for CI (scripts/stress.sh runs 300 streams); any TSan report fails the test.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/scripts/tsan.supp}
PDSERVE_STRESS_STREAMS=${PDSERVE_STRESS_STREAMS:-80} build-tsan/bin/fault_router_test --gtest_filter='*Stress*'
stage "fuzz smoke (libFuzzer; the targets of the sanitizer build)"
scripts/fuzz.sh 15
if [[ "$(uname -m)" == x86_64 ]]; then
  # The engine on Arm: NEON (Highway) and scalar kernels, each checked as on x86 (the NumPy
  # reference, batch invariance, chunked prefill); correctness only, emulated.
  stage "the engine cross-compiled for Arm (aarch64)"
  scripts/build.sh arm64
  stage "the Arm engine's tests under qemu-user"
  (cd build-arm64 && ctest --output-on-failure --no-tests=error -j "$jobs" --timeout 900)
fi
report_stages
echo "== all tests passed =="
