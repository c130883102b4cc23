#!/usr/bin/env bash
# The previous release of crr (CRR_PREVIOUS_RELEASE in hack/versions.sh), for the upgrade test
# (tests/e2e/tests/upgrade.rs, docs/upgrading.md): its source, its three binaries and their
# images, cached by commit under $CRR_CACHE/previous-release/<commit>/ so a second run only
# imports them.
#
#   hack/previous-release.sh build    source (git archive of the commit) and the image archives;
#                                     touches no test bed
#   hack/previous-release.sh import   build if needed, then import the images into every node's
#                                     containerd as crr.local/<binary>:previous
#   hack/previous-release.sh chart    prints the previous release's chart folder (after build)
#   hack/previous-release.sh commit   prints the commit
#   hack/previous-release.sh          build and import
#
# The binaries are built from the commit's own Cargo.lock (--locked) in the working tree's own
# target/ (or $CARGO_TARGET_DIR; $CRR_PREVIOUS_TARGET_DIR overrides), with the command `make
# unit` builds (`cargo test --workspace`, not run): the same dependencies with the same features,
# so every crate the two share is compiled once. Cargo names a workspace crate's artifacts by its
# path relative to the workspace root, its name and version, not by where the checkout lies: the
# previous release's crates would take the working tree's artifacts for their own (and the other
# way round), and one build would hand out the other's binaries as fresh. So the unpacked tree's
# workspace version gets the suffix `-previous`, in Cargo.toml and in Cargo.lock's entries of its
# path crates (nothing else in the lock changes): its crates are then other crates to cargo, built
# beside the working tree's. Only the three binaries cargo copies to target/debug/ are
# overwritten; they are turned into images at once, and the next cargo build of the working tree
# copies its own back (cargo does so even when nothing is compiled again): hack/install.sh and
# hack/cluster-test.sh build before they use them.
# The images are made as hack/images.sh makes crr.local/<binary>:dev (hack/oci-image.sh, the
# binary and the libraries it loads), tagged :previous so the working tree's :dev stay.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"
. "$here/cargo-env.sh"
root="$(cd "$here/.." && pwd)"

commit="$(git -C "$root" rev-parse --verify --quiet "${CRR_PREVIOUS_RELEASE:?hack/versions.sh sets it}^{commit}")" || {
  echo "previous-release: commit $CRR_PREVIOUS_RELEASE is not in this clone (a shallow one? git fetch --unshallow)" >&2
  exit 1
}
cache="$CRR_CACHE/previous-release/$commit"
src="$cache/src"
images="$cache/images"
target="${CRR_PREVIOUS_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}}"
tag=previous
bins=(crr-operator crr-webhook crr-node-daemon)

# rename_workspace_version DIR: `[workspace.package] version` gets the suffix -previous, and so
# does the version of every path crate (no `source`) in Cargo.lock, so that --locked still holds.
rename_workspace_version() {
  local dir="$1"
  awk '/^\[/ { section = $0 }
       section == "[workspace.package]" && /^version = "[^"]*"$/ { sub(/"$/, "-previous\"") }
       { print }' "$dir/Cargo.toml" >"$dir/Cargo.toml.new"
  awk 'function flush() { if (block != "") { if (!sourced) sub(/\nversion = "[^"]*/, "&-previous", block); printf "%s", block }; block = ""; sourced = 0 }
       /^\[\[package\]\]$/ { flush() }
       { block = block $0 "\n"; if ($0 ~ /^source = /) sourced = 1 }
       END { flush() }' "$dir/Cargo.lock" >"$dir/Cargo.lock.new"
  grep -q -- '-previous"' "$dir/Cargo.toml.new" ||
    { echo "previous-release: no [workspace.package] version in $dir/Cargo.toml" >&2; exit 1; }
  mv "$dir/Cargo.toml.new" "$dir/Cargo.toml"
  mv "$dir/Cargo.lock.new" "$dir/Cargo.lock"
}

# The commit's tree, unpacked once (no git worktree: nothing is added to the checkout's .git).
source_tree() {
  # (A tree unpacked before the version was renamed is unpacked again.)
  [[ -f $src/.complete ]] && grep -q -- '-previous"' "$src/Cargo.toml" && return
  rm -rf "$src"
  mkdir -p "$src"
  git -C "$root" archive --format=tar "$commit" | tar -x -C "$src"
  rename_workspace_version "$src"
  touch "$src/.complete"
  echo "previous-release: ${commit:0:12} unpacked in $src" >&2
}

build() {
  source_tree
  [[ -f $images/.complete ]] && { echo "previous-release: images of ${commit:0:12} cached in $images" >&2; return; }
  echo "previous-release: building ${bins[*]} of ${commit:0:12} (target $target)" >&2
  local started=$SECONDS
  (cd "$src" && CARGO_TARGET_DIR="$target" cargo test -q --locked --workspace --no-run)
  echo "previous-release: built in $((SECONDS - started)) s" >&2
  rm -rf "$images"
  local name binaries=()
  for name in "${bins[@]}"; do binaries+=("$target/debug/$name"); done
  CRR_IMAGE_TAG="$tag" "$here/images.sh" archive "$images" "${binaries[@]}" >&2
  echo "$commit" > "$images/.complete"
}

# Into every node's containerd (hack/cluster-env.sh: node_sockets), as hack/images.sh imports.
import() {
  build
  local name socket
  for name in "${bins[@]}"; do
    for socket in $(node_sockets); do
      ctr --address "$socket" -n k8s.io images import "$images/$name.tar" >/dev/null
    done
    echo "previous-release: imported crr.local/$name:$tag" >&2
  done
}

case "${1:-all}" in
  build) build ;;
  import) import ;;
  chart) source_tree; echo "$src/manifests/helm/crr" ;;
  commit) echo "$commit" ;;
  all) import ;;
  *) echo "usage: $0 [build | import | chart | commit]" >&2; exit 2 ;;
esac
