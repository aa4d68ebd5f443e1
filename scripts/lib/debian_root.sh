# Sourced (bash): a fresh Debian 12 root to run things in as on a new machine, without a
# container engine. Used by scripts/image_rootfs.sh (the image's runtime stage) and
# scripts/fresh_demo.sh (the README's first command on a fresh machine). As root.
#
#   debian_root_base WORK      a debootstrap'ed minbase bookworm (what debian:12-slim holds) in
#                              WORK/base, made once (network to $PDSERVE_DEBIAN_MIRROR or
#                              deb.debian.org) and reused
#   debian_root_fresh ROOT     ROOT made a fresh copy of that base, with the host's DNS
#                              configuration and /proc, /sys, /dev bound in
#   debian_root_release        unbinds what debian_root_fresh bound (call it from an EXIT trap)

debian_root_mounts=()

debian_root_base() {
  local work=$1 mirror=${PDSERVE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  debian_root_base_dir=$work/base
  [[ -x $work/base/usr/bin/apt-get ]] && return 0
  echo "== base: debootstrap --variant=minbase bookworm ($mirror)"
  command -v debootstrap >/dev/null || apt-get install -y -q debootstrap
  rm -rf "$work/base"
  mkdir -p "$work"
  if ! debootstrap --variant=minbase bookworm "$work/base" "$mirror" >"$work/debootstrap.log" 2>&1
  then
    tail -20 "$work/debootstrap.log" >&2
    echo "debian_root: debootstrap failed (log: $work/debootstrap.log)" >&2
    return 1
  fi
}

debian_root_fresh() {
  local root=$1 fs
  # Never remove a root that still has the host's /dev, /proc or /sys bound into it (a run
  # killed before its cleanup): unmount them first, and stop if that fails.
  if grep -q " $root/" /proc/mounts; then
    grep " $root/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l || true
    if grep -q " $root/" /proc/mounts; then
      echo "debian_root: $root still has mounts; not removing it" >&2
      return 1
    fi
  fi
  rm -rf "$root"
  cp -a "$debian_root_base_dir" "$root"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  for fs in proc sys dev; do
    mount --rbind "/$fs" "$root/$fs"
    mount --make-rslave "$root/$fs"
    debian_root_mounts+=("$root/$fs")
  done
}

debian_root_release() {
  local i
  for ((i = ${#debian_root_mounts[@]} - 1; i >= 0; i--)); do
    umount -l "${debian_root_mounts[i]}" || true
  done
  debian_root_mounts=()
}
