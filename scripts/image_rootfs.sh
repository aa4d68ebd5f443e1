#!/usr/bin/env bash
# Builds the pdserve image (deploy/docker/Dockerfile) without a container engine and runs it,
# in either variant (--variant cpu, the default, or cuda: the PDSERVE_VARIANT build argument):
#   build stage    the variant's build stage's last RUN step verbatim (the README's
#                  scripts/install_deps.sh, then scripts/build.sh image with the CUDA backend
#                  off, or on with the stage's nvcc path) on this Debian 12 host, the stages'
#                  base;
#   runtime stage  a debootstrap'ed Debian 12 root (minbase: what debian:12-slim holds), the
#                  variant's runtime stages replayed in it: their RUN steps verbatim (apt
#                  packages, the user, ld.so.conf), their COPY --from=build steps copied in.
#                  NVIDIA's CUDA repository cannot be reached from here, so its install step
#                  (cuda variant) is stood in for: the libraries of the packages it names are
#                  copied from this host's CUDA toolkit (of the version the recipe names) to
#                  where NVIDIA's packages put them;
#   run            as the image's USER inside that root: pdctl starts a router, a prefill and a
#                  decode worker from /usr/local/bin, a request is served (offloaded: the KV
#                  crosses UCX shm between two image processes), the chart's exec probe
#                  (pdctl health) answers SERVING, and the cluster stops. In the cuda variant
#                  also: the loader finds cuBLAS, and --backend=cuda without a GPU stops with
#                  its clear error.
# What this does not test: the build stage inside the image's base (it runs on the host), the
# image's layering and entrypoint metadata, NVIDIA's packages themselves (see above), and the
# CUDA backend on a GPU (none here).
# Usage: scripts/image_rootfs.sh [--variant cpu|cuda] [WORK_DIR]   (as root: debootstrap and
# chroot; network to Debian's mirror on the first run, which caches the base in WORK_DIR/base)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/debian_root.sh
variant=cpu
if [[ ${1:-} == --variant ]]; then
  variant=${2:?--variant cpu|cuda}
  shift 2
fi
[[ $variant == cpu || $variant == cuda ]] || { echo "--variant: cpu or cuda, not $variant" >&2; exit 2; }
work=${1:-/var/tmp/pdserve-image}
dockerfile=deploy/docker/Dockerfile
if [[ $(id -u) != 0 ]]; then
  echo "image_rootfs: run as root (debootstrap and chroot need it)" >&2
  exit 2
fi

build_step=$(python3 deploy/docker/stages.py "$dockerfile" "$variant" build |
  awk -F'\t' '$2 == "RUN" {step = $3} END {print step}')
echo "== build stage ($variant): $build_step"
bash -ec "$build_step"

debian_root_base "$work"

root=$work/root
cleanup() {
  if [[ -x $root/usr/local/bin/pdctl ]]; then
    chroot --userspec=10001:10001 "$root" /bin/sh -c \
      'cd /tmp/smoke 2>/dev/null && pdctl down -f cluster.yaml >/dev/null 2>&1' || true
  fi
  debian_root_release
}
trap cleanup EXIT
echo "== runtime stage: a fresh copy of the base"
debian_root_fresh "$root"

# The variant's runtime stages, as the Dockerfile writes them.
steps=$(python3 deploy/docker/stages.py "$dockerfile" "$variant")
# NVIDIA's packages, stood in for: the libraries each holds (deploy/docker/stages.py), of the
# CUDA version in its name.
stand_in_nvidia() {
  local package stem version dir libraries lib found host_dir
  for package in $(grep -o '\b\(cuda-cudart\|libcublas\)-[0-9]*-[0-9]*\b' <<<"$1"); do
    stem=${package%-*-*}
    version=${package#"$stem"-}
    version=${version/-/.}
    dir=/usr/local/cuda-$version/targets/x86_64-linux/lib
    echo "== stand-in for NVIDIA's $package: this host's CUDA $version libraries -> $dir"
    mkdir -p "$root$dir"
    libraries=$(python3 deploy/docker/stages.py --nvidia-libraries "$stem")
    for lib in $libraries; do
      found=0
      for host_dir in "/usr/local/cuda-$version/targets/x86_64-linux/lib" \
                      "/usr/local/cuda-$version/lib64" "/usr/local/cuda-$version/lib"; do
        if compgen -G "$host_dir/$lib" >/dev/null; then
          cp -a "$host_dir"/$lib "$root$dir/"
          found=1
          break
        fi
      done
      ((found)) || { echo "image_rootfs: no CUDA $version $lib here (for $package)" >&2; exit 1; }
    done
  done
}
user=""
while IFS=$'\t' read -r stage kind rest; do
  case "$kind" in
    RUN)
      if [[ $rest == *cuda-keyring* ]]; then
        stand_in_nvidia "$rest"
        continue
      fi
      echo "== $stage: RUN $rest" | cut -c1-160
      chroot "$root" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive; $rest"
      ;;
    ADD)
      # NVIDIA's repository key: its install step is stood in for (above).
      [[ $rest == *developer.download.nvidia.com*cuda-keyring* ]] ||
        { echo "image_rootfs: cannot replay ADD $rest" >&2; exit 1; }
      ;;
    COPY)
      read -r -a args <<<"$rest"
      [[ ${args[0]} == --from=build ]] || continue
      paths=("${args[@]:1}")
      dest=${paths[-1]}
      unset 'paths[-1]'
      echo "== $stage: COPY ${#paths[@]} path(s) -> $dest"
      if [[ $dest == */ ]]; then mkdir -p "$root$dest"; else mkdir -p "$(dirname "$root$dest")"; fi
      for src in "${paths[@]}"; do cp -L "./${src#/src/}" "$root$dest"; done
      ;;
    USER) user=$rest ;;
  esac
done <<<"$steps"
[[ -n $user ]] || { echo "image_rootfs: the runtime stage sets no USER" >&2; exit 1; }
echo "== the image holds: $(ls "$root/usr/local/bin" | tr '\n' ' ')"

echo "== run as USER $user: a cluster from /usr/local/bin serves a request"
mkdir -p "$root/tmp/smoke"
chown "$user" "$root/tmp/smoke"
cat >"$root/tmp/smoke/cluster.yaml" <<'EOF'
run_dir: run
model:
  dir: models/tiny
  preset: tiny
ucx_transports: shm
router:
  listen: 127.0.0.1:57151
  registry_listen: 127.0.0.1:57152
  metrics_listen: 127.0.0.1:0
  policy: always_offload
  cost_model: /etc/pdserve/cost_model.json
prefill:
  - name: prefill-0
    threads: 1
decode:
  - name: decode-0
    threads: 1
EOF
chroot --userspec="$user" "$root" /bin/sh -ec '
  cd /tmp/smoke
  export HOME=/tmp/smoke
  pdctl up -f cluster.yaml
  pdctl generate -f cluster.yaml --prompt="The llama in the field ate its hay and then" \
    --max_tokens=8 --temperature=0 2>placement.txt
  cat placement.txt
  grep -q "offload" placement.txt
  pdctl health --address=127.0.0.1:57151 --service=pdserve.ready
  pdctl down -f cluster.yaml
'
if [[ $variant == cuda ]]; then
  echo "== cuda: the loader finds the CUDA runtime and cuBLAS; --backend=cuda without a GPU"
  chroot --userspec="$user" "$root" /bin/sh -ec '
    cd /tmp/smoke
    ldd /usr/local/bin/pdserve-decode | grep "libcudart.so"
    ! ldd /usr/local/bin/pdserve-decode | grep "not found"
    /sbin/ldconfig -p | grep "libcublas.so"
    if pdserve-decode --backend=cuda --model=models/tiny --router=127.0.0.1:1 2>cuda.txt; then
      echo "pdserve-decode --backend=cuda started without a GPU" >&2
      exit 1
    fi
    grep "backend cuda: no usable GPU" cuda.txt
  '
fi
echo "== image_rootfs ($variant): the image built without an engine, and its binaries served a request"
