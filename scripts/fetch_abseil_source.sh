#!/usr/bin/env bash
# Unpacks Debian's source package of the installed Abseil (the exact version of the headers in
# /usr/include) into DIR, for the ThreadSanitizer build (cmake/PdserveTsanAbseil.cmake). A no-op
# when DIR already holds it. Needs apt (root or sudo): a deb-src entry is added for the download
# and removed again.
# Usage: scripts/fetch_abseil_source.sh DIR
set -euo pipefail
dir=$1
# The native package's (with the Arm cross build's arm64 one beside it, an unqualified name
# prints both).
version=$(dpkg-query -W -f='${source:Version}' "libabsl-dev:$(dpkg --print-architecture)")
if [[ -f "$dir/.version" && $(cat "$dir/.version") == "$version" ]]; then exit 0; fi
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
work=$(mktemp -d)
list=/etc/apt/sources.list.d/pdserve-deb-src.sources
cleanup() {
  "${sudo_cmd[@]}" rm -f "$list"
  rm -rf "$work"
}
trap cleanup EXIT
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  "$suite" | "${sudo_cmd[@]}" tee "$list" >/dev/null
"${sudo_cmd[@]}" apt-get update -qq -o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts="$(dirname "$list")" \
  >/dev/null 2>&1 || "${sudo_cmd[@]}" apt-get update -qq >/dev/null
(cd "$work" && apt-get source --download-only -qq "abseil=$version" >/dev/null 2>&1)
rm -rf "$dir"
mkdir -p "$dir"
tar -xzf "$work"/abseil_*.orig.tar.gz -C "$dir" --strip-components=1
echo "$version" >"$dir/.version"
