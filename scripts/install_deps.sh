#!/usr/bin/env bash
# Installs what a fresh Debian 12 (bookworm) machine lacks to build, test and run pdserve.
# Idempotent: when every package is already present it only runs dpkg-query (well under a second)
# and touches neither the network nor apt's lists.
#
# Usage: scripts/install_deps.sh            # build + runtime + test dependencies
#        scripts/install_deps.sh --build    # only what building and running the product needs
#                                           # (scripts/demo.sh, the image's build stage): no
#                                           # test, benchmark or lint tools (clang, Node,
#                                           # Prometheus, ...), a fraction of the download
#        scripts/install_deps.sh --arm64    # and, on x86-64, the Arm cross build's: Debian's
#                                           # aarch64 toolchain, qemu-user and the engine's
#                                           # libraries for arm64 (multiarch)
set -euo pipefail

arm64=false
build_only=false
case "${1:-}" in
  --arm64) [[ "$(dpkg --print-architecture)" == amd64 ]] && arm64=true ;;
  --build) build_only=true ;;
  "") ;;
  *)
    echo "usage: $0 [--build|--arm64]" >&2
    exit 2
    ;;
esac

packages=(
  # Toolchain.
  cmake ninja-build ccache g++ pkg-config
  # Libraries (see README, "Dependencies").
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libucx-dev libabsl-dev prometheus-cpp-dev libopenblas-dev libre2-dev libyaml-cpp-dev
  nlohmann-json3-dev libutf8proc-dev libssl-dev libboost-dev libhwy-dev
  # scripts/demo.sh's HTTP request and its answer's JSON.
  curl python3
)
if ! $build_only; then
  packages+=(
    # Lint and the thread-safety check; tests and benchmarks.
    clang libclang-rt-14-dev clang-format libgtest-dev libgmock-dev libbenchmark-dev ucx-utils
    # Tests, benchmarks and tools: NumPy reference forward, npm tokenizer fixture, promtool,
    # plots, coverage, test certificates (openssl), helm extraction (unzip).
    python3-numpy python3-yaml nodejs npm prometheus gnuplot-nox gcovr openssl unzip
  )
fi

if $arm64; then
  packages+=(g++-aarch64-linux-gnu qemu-user libabsl-dev:arm64 libre2-dev:arm64
             libutf8proc-dev:arm64 libhwy-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64)
fi

native=$(dpkg --print-architecture)
# Whether PKG[:ARCH] is installed: an unqualified name is the native or architecture-independent
# package (with arm64 ones beside it, dpkg-query lists every architecture's).
installed() {
  local name=${1%%:*} arch=$native
  [[ "$1" == *:* ]] && arch=${1#*:}
  dpkg-query -W -f='${Status} ${Architecture}\n' "$name" 2>/dev/null |
    grep -qE "^install ok installed ($arch|all)\$"
}
missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
# Node/npm may come from outside Debian on some images; accept any working npm.
if command -v npm >/dev/null 2>&1; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install_deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
if $arm64 && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  "${sudo_cmd[@]}" dpkg --add-architecture arm64
fi
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
