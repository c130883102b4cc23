#!/usr/bin/env bash
# Installs a pinned cargo tool into its own folder of the cache on first use (a few minutes of
# build, once per machine) and prints the path of its binary:
#   hack/cargo-tool.sh CRATE VERSION ROOT BINARY
# hack/cargo-deny.sh (cargo-deny) and hack/sbom.sh (cargo-cyclonedx) use it; their versions and
# folders are in hack/versions.sh.
set -euo pipefail
(( $# == 4 )) || { echo "usage: $0 CRATE VERSION ROOT BINARY" >&2; exit 2; }
crate="$1" version="$2" root="$3" binary="$4"
if [[ ! -x "$root/bin/$binary" ]]; then
  echo "cargo-tool: installing $crate $version into $root" >&2
  cargo install --locked --quiet --root "$root.partial" "$crate@$version" >&2
  rm -rf "$root"
  mv "$root.partial" "$root"
fi
echo "$root/bin/$binary"
