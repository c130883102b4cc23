#!/usr/bin/env bash
# Installs a pinned cargo tool into its own folder of the cache on first use (once per machine)
# and prints the path of its binary:
#   hack/cargo-tool.sh CRATE VERSION ROOT BINARY
# hack/cargo-deny.sh (cargo-deny) and hack/sbom.sh (cargo-cyclonedx) use it; their versions and
# folders are in hack/versions.sh.
#
# The tools are built with the cheapest profile that works: no optimisation, no debug info, no
# LTO, many codegen units. cargo-deny built so takes about 1.5 min cold on 2 cores instead of 5,
# and its check of this workspace still takes seconds (hack/README.md has the figures). It builds in
# a temporary folder of its own, never in $CARGO_TARGET_DIR: the workspace's build runs beside it.
set -euo pipefail
(( $# == 4 )) || { echo "usage: $0 CRATE VERSION ROOT BINARY" >&2; exit 2; }
crate="$1" version="$2" root="$3" binary="$4"
if [[ ! -x "$root/bin/$binary" ]]; then
  echo "cargo-tool: installing $crate $version into $root" >&2
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_LTO=off \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 CARGO_PROFILE_RELEASE_STRIP=true CARGO_INCREMENTAL=0 \
    env -u CARGO_TARGET_DIR cargo install --locked --quiet --root "$root.partial" "$crate@$version" >&2
  rm -rf "$root"
  mv "$root.partial" "$root"
fi
echo "$root/bin/$binary"
