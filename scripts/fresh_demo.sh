#!/usr/bin/env bash
# Times the README's first command (scripts/demo.sh) as a fresh Debian 12 machine runs it: in a
# debootstrap'ed minbase root (scripts/lib/debian_root.sh) that has only git and sudo added (to
# clone and to install), on a clone of this checkout's HEAD, with no package installed and an
# empty compiler cache. Runs it twice: the first run (packages, the build, the demo) and the
# second (everything in place). Prints each run's time and the demo's own stage lines.
# What it does not reproduce: a cloud machine's mirror and disk (this host's are used), and its
# other software (a minbase root has less than most images, so the installs here are an upper
# bound).
# Usage: scripts/fresh_demo.sh [WORK_DIR]   (as root; network to Debian's mirror)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/debian_root.sh
work=${1:-/var/tmp/pdserve-fresh}
if [[ $(id -u) != 0 ]]; then
  echo "fresh_demo: run as root (debootstrap and chroot need it)" >&2
  exit 2
fi
debian_root_base "$work"
root=$work/root
cleanup() {
  if [[ -x $root/src/build-demo/bin/pdctl ]]; then
    chroot "$root" /bin/sh -c 'cd /src && build-demo/bin/pdctl down -f deploy/local/cluster.yaml' \
      >/dev/null 2>&1 || true
  fi
  debian_root_release
}
trap cleanup EXIT
echo "== a fresh root in $root"
debian_root_fresh "$root"
echo "== what the user had before the README: git and sudo (not timed)"
chroot "$root" /bin/sh -ec 'export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends git sudo ca-certificates >/dev/null'
git clone -q "file://$PWD" "$root/src"
for run in first second; do
  echo "== scripts/demo.sh, $run run"
  start=$SECONDS
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb \
    /bin/bash -c 'cd /src && scripts/demo.sh' >"$work/demo-$run.log" 2>&1 || {
    tail -40 "$work/demo-$run.log" >&2
    echo "fresh_demo: the $run run failed (log: $work/demo-$run.log)" >&2
    exit 1
  }
  elapsed=$((SECONDS - start))
  grep -E '^== (installing|building)|^   (installed|built) in' "$work/demo-$run.log" | sed 's/^/   /'
  echo "   $run run: $((elapsed / 60)) min $((elapsed % 60)) s (log: $work/demo-$run.log)"
done
