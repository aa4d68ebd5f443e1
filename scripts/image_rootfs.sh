#!/usr/bin/env bash
# Builds the pdserve image (deploy/docker/Dockerfile) without a container engine and runs it:
#   build stage    the stage's own command, `scripts/build.sh image`, on this Debian 12 host
#                  (the stage's base; its `scripts/install_deps.sh` is what the README runs);
#   runtime stage  a debootstrap'ed Debian 12 root (minbase: what debian:12-slim holds), the
#                  Dockerfile's runtime RUN step replayed in it verbatim (its apt packages, its
#                  user), its COPY --from=build steps copied in;
#   run            as the image's USER inside that root: pdctl starts a router, a prefill and a
#                  decode worker from /usr/local/bin, a request is served (offloaded: the KV
#                  crosses UCX shm between two image processes), the chart's exec probe
#                  (pdctl health) answers SERVING, and the cluster stops.
# What this does not test: the build stage inside the image's base (it runs on the host), the
# image's layering and entrypoint metadata, and the CUDA variant (no GPU, no CUDA base here).
# Usage: scripts/image_rootfs.sh [WORK_DIR]   (as root: debootstrap and chroot; network to
# Debian's mirror on the first run, which caches the base in WORK_DIR/base)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/var/tmp/pdserve-image}
dockerfile=deploy/docker/Dockerfile
mirror=${PDSERVE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [[ $(id -u) != 0 ]]; then
  echo "image_rootfs: run as root (debootstrap and chroot need it)" >&2
  exit 2
fi

# The stage's base (debian:12-slim) has no nvcc, so CMake builds the CPU image there; this host
# may have one, which would link the CUDA runtime into binaries whose image does not hold it.
echo "== build stage: scripts/build.sh image -DPDSERVE_CUDA=OFF"
scripts/build.sh image -DPDSERVE_CUDA=OFF

if [[ ! -x $work/base/usr/bin/apt-get ]]; then
  echo "== base: debootstrap --variant=minbase bookworm ($mirror)"
  command -v debootstrap >/dev/null || apt-get install -y -q debootstrap
  rm -rf "$work/base"
  mkdir -p "$work"
  debootstrap --variant=minbase bookworm "$work/base" "$mirror"
fi

root=$work/root
mounted=()
cleanup() {
  if [[ -x $root/usr/local/bin/pdctl ]]; then
    chroot --userspec=10001:10001 "$root" /bin/sh -c \
      'cd /tmp/smoke 2>/dev/null && pdctl down -f cluster.yaml >/dev/null 2>&1' || true
  fi
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" || true; done
}
trap cleanup EXIT
echo "== runtime stage: a fresh copy of the base"
# Never remove a root that still has the host's /dev, /proc or /sys bound into it (a run
# killed before its cleanup): unmount them first, and stop if that fails.
if grep -q " $root/" /proc/mounts; then
  grep " $root/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l || true
  if grep -q " $root/" /proc/mounts; then
    echo "image_rootfs: $root still has mounts; not removing it" >&2
    exit 1
  fi
fi
rm -rf "$root"
cp -a "$work/base" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
for fs in proc sys dev; do
  mount --rbind "/$fs" "$root/$fs"
  mount --make-rslave "$root/$fs"
  mounted+=("$root/$fs")
done

# The runtime stage's steps, as the Dockerfile writes them.
steps=$(python3 - "$dockerfile" <<'EOF'
import re, shlex, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
runtime = re.split(r"^FROM ", text, flags=re.M)[-1]
for line in runtime.splitlines():
    word, _, rest = line.strip().partition(" ")
    if word == "RUN":
        print("RUN\t" + rest.strip())
    elif word == "COPY":
        args = shlex.split(rest)
        if args and args[0] == "--from=build":
            print("COPY\t" + "\t".join(args[1:]))
    elif word == "USER":
        print("USER\t" + rest.strip())
EOF
)
user=""
while IFS=$'\t' read -r kind rest; do
  case "$kind" in
    RUN)
      echo "== RUN $rest" | cut -c1-160
      chroot "$root" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive; $rest"
      ;;
    COPY)
      IFS=$'\t' read -r -a paths <<<"$rest"
      dest=${paths[-1]}
      unset 'paths[-1]'
      echo "== COPY ${#paths[@]} path(s) -> $dest"
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
echo "== image_rootfs: the image built without an engine, and its binaries served a request"
