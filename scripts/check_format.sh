#!/usr/bin/env bash
# Checks that every C++/CUDA file of the tree, tracked or new (untracked but not ignored), is
# formatted as .clang-format says (Google style, 100 columns). Prints the files that are not and
# fails; scripts/check_format.sh --fix reformats them in place. (New files count: a file
# formatted only once it was added once reached CI unformatted.)
set -euo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format || command -v clang-format-14 || true)
if [[ -z "$format" ]]; then
  echo "check_format: clang-format not found (scripts/install_deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' '*.h' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  "$format" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$format" --dry-run -Werror "$f" > /dev/null 2>&1; then bad+=("$f"); fi
done
if (( ${#bad[@]} > 0 )); then
  printf 'check_format: not formatted (run scripts/check_format.sh --fix):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files ok"
