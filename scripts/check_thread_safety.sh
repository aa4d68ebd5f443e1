#!/usr/bin/env bash
# Checks the lock annotations (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...) with
# clang's -Wthread-safety: every first-party C++ file of a configured build is compiled by
# clang++ in syntax-only mode with the build's own flags, and any thread-safety warning fails.
# GCC ignores the annotations, so without this they are comments.
# Usage: scripts/check_thread_safety.sh [--skip LIST] [build-dir [file.cc ...]]
#   build-dir defaults to build (needs compile_commands.json); given files, checks only those
#   (e.g. $(git diff --name-only HEAD~1 -- '*.cc') while working). --skip LIST: a file of
#   sources (one per line) not to check, e.g. those a build with -DPDSERVE_THREAD_SAFETY=ON
#   (the sanitizer build) has compiled with the same check.
set -euo pipefail
cd "$(dirname "$0")/.."
skip_list=/dev/null
if [[ "${1:-}" == --skip ]]; then
  skip_list=$2
  shift 2
fi
build=${1:-build}
shift || true
only=("$@")
clangxx=$(command -v clang++ || command -v clang++-14 || true)
if [[ -z "$clangxx" ]]; then
  echo "check_thread_safety: clang++ not found (scripts/install_deps.sh installs it)" >&2
  exit 1
fi
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "check_thread_safety: $build/compile_commands.json missing; configure the build first" >&2
  exit 1
fi
commands=$(mktemp)
trap 'rm -f "$commands"' EXIT
python3 - "$build/compile_commands.json" "$PWD" "$clangxx" "$skip_list" "${only[@]}" > "$commands" <<'PY'
import json, os, shlex, sys
db, root, clangxx = sys.argv[1], os.path.realpath(sys.argv[2]) + "/", sys.argv[3]
skipped = {os.path.realpath(f.strip()) for f in open(sys.argv[4]) if f.strip()}
only = {os.path.realpath(f) for f in sys.argv[5:]}
seen = set(skipped)
for entry in json.load(open(db)):
    src = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if not src.startswith(root) or not src.endswith(".cc") or "/build" in src[len(root):].split("/")[0]:
        continue
    if src in seen or (only and src not in only):
        continue
    seen.add(src)
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = [clangxx, "-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith("-W") or a == src or a == entry["file"]:
            continue
        out.append(a)
    out.append(src)
    print(entry["directory"] + "\t" + shlex.join(out))
PY
total=$(wc -l < "$commands")
echo "check_thread_safety: $total files with $clangxx -Wthread-safety" \
  "($(grep -c . "$skip_list" || true) skipped: checked while they were compiled)"
failed=0
# One clang per core; each line is "directory<TAB>command".
if ! tr '\n' '\0' < "$commands" | xargs -0 -P "$(nproc)" -I{} bash -c \
    'line="$1"; cd "${line%%$'"'"'\t'"'"'*}" && eval "${line#*$'"'"'\t'"'"'}"' _ {}; then
  failed=1
fi
if [[ $failed -ne 0 ]]; then
  echo "check_thread_safety: FAILED (see the thread-safety errors above)" >&2
  exit 1
fi
echo "check_thread_safety: ok"
