#!/usr/bin/env bash
# README command (a): install what is missing, build, and run the main job.
# Today the furthest-along part of pdserve is the shared server lifecycle (gRPC health,
# /metrics, SIGTERM drain); this script starts a server, checks it, scrapes it and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh release >/dev/null
run_dir=$(mktemp -d /tmp/pdserve-demo-XXXXXX)
trap 'kill $pid 2>/dev/null || true; rm -rf "$run_dir"' EXIT
build/bin/pdserve-test-server --serving_info_path="$run_dir/info" --ready_delay=0s \
  2>"$run_dir/log" &
pid=$!
for _ in $(seq 100); do [[ -f "$run_dir/info" ]] && break; sleep 0.05; done
cat "$run_dir/info"
metrics=$(grep '^metrics=' "$run_dir/info" | cut -d= -f2)
echo "--- /metrics (first lines) ---"
exec 3<>"/dev/tcp/${metrics%:*}/${metrics#*:}"
printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
head -n 12 <&3
kill -TERM $pid
wait $pid
echo "server drained and exited with status $?"
