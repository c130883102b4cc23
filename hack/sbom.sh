#!/usr/bin/env bash
# CycloneDX SBOMs (JSON, spec 1.5) of crr's three images, into target/sbom/ (`make sbom`):
#   <binary>.cdx.json      every crate compiled into the binary, from Cargo's metadata and
#                          Cargo.lock, by cargo-cyclonedx (CARGO_CYCLONEDX_VERSION in
#                          hack/versions.sh, installed with cargo into the cache on first use)
#   <binary>.os.cdx.json   the rest of the image: the shared libraries hack/images.sh copies
#                          beside the binary (ldd of target/release/<binary>), as the Debian
#                          packages that ship them, with their versions (dpkg)
# Run after a release build (`cargo build --release -p crr-operator -p crr-webhook
# -p crr-node-daemon`, as hack/install.sh with CRR_PROFILE=release makes): the OS part reads the
# built binaries.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
root="$here/.."
tool="$("$here/cargo-tool.sh" cargo-cyclonedx "$CARGO_CYCLONEDX_VERSION" "$CARGO_CYCLONEDX_ROOT" cargo-cyclonedx)"
bins=(crr-operator crr-webhook crr-node-daemon)
out="$root/target/sbom"
mkdir -p "$out"
cd "$root"
# One run describes every binary of the workspace, each beside its crate's Cargo.toml.
"$tool" cyclonedx --format json --spec-version 1.5 --describe binaries --no-build-deps -q
for bin in "${bins[@]}"; do
  file="$(find . -path ./target -prune -o -name "${bin}_bin.cdx.json" -print -quit)"
  [[ -n $file ]] || { echo "sbom: cargo-cyclonedx wrote no SBOM for $bin" >&2; exit 1; }
  mv "$file" "$out/$bin.cdx.json"
done
find . -path ./target -prune -o -name '*_bin.cdx.json' -print0 | xargs -0 rm -f

# The Debian package that ships LIB, under any of the names a merged /usr gives it.
owner() {
  local lib="$1" real path
  real="$(readlink -f "$lib")"
  for path in "$lib" "$real" "${lib#/usr}" "/usr${lib#/usr}" "${real#/usr}"; do
    if dpkg -S "$path" >/dev/null 2>&1; then
      dpkg -S "$path" | head -1 | cut -d: -f1
      return
    fi
  done
  echo "sbom: no Debian package ships $lib" >&2
  return 1
}

# The image's other content: the libraries the binary loads, by Debian package.
for bin in "${bins[@]}"; do
  binary="$root/target/release/$bin"
  [[ -x $binary ]] || { echo "sbom: $binary is not built (cargo build --release -p $bin)" >&2; exit 1; }
  components=""
  for package in $(ldd "$binary" | grep -oE '/[^ ]+' | while read -r lib; do owner "$lib"; done | sort -u); do
    version="$(dpkg-query -W -f '${Version}' "$package")"
    arch="$(dpkg-query -W -f '${Architecture}' "$package")"
    components+="${components:+,}{\"type\":\"library\",\"name\":\"$package\",\"version\":\"$version\",\"purl\":\"pkg:deb/debian/$package@$version?arch=$arch\"}"
  done
  [[ -n $components ]] || { echo "sbom: no Debian package found for the libraries of $bin" >&2; exit 1; }
  printf '{"bomFormat":"CycloneDX","specVersion":"1.5","version":1,"metadata":{"component":{"type":"container","name":"crr.local/%s"}},"components":[%s]}\n' \
    "$bin" "$components" > "$out/$bin.os.cdx.json"
  echo "sbom: $out/$bin.cdx.json, $out/$bin.os.cdx.json"
done
