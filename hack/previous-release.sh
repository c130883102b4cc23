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
# The binaries are built from the commit's own Cargo.lock (--locked) in their own target folder
# (target/previous, or $CRR_PREVIOUS_TARGET_DIR), so the working tree's build is not disturbed.
# The images are made as hack/images.sh makes crr.local/<binary>:dev (hack/oci-image.sh, the
# binary and the libraries it loads), tagged :previous so the working tree's :dev stay.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"
root="$(cd "$here/.." && pwd)"

commit="$(git -C "$root" rev-parse --verify --quiet "${CRR_PREVIOUS_RELEASE:?hack/versions.sh sets it}^{commit}")" || {
  echo "previous-release: commit $CRR_PREVIOUS_RELEASE is not in this clone (a shallow one? git fetch --unshallow)" >&2
  exit 1
}
cache="$CRR_CACHE/previous-release/$commit"
src="$cache/src"
images="$cache/images"
target="${CRR_PREVIOUS_TARGET_DIR:-$root/target/previous}"
tag=previous
bins=(crr-operator crr-webhook crr-node-daemon)

# The commit's tree, unpacked once (no git worktree: nothing is added to the checkout's .git).
source_tree() {
  [[ -f $src/.complete ]] && return
  rm -rf "$src"
  mkdir -p "$src"
  git -C "$root" archive --format=tar "$commit" | tar -x -C "$src"
  touch "$src/.complete"
  echo "previous-release: ${commit:0:12} unpacked in $src" >&2
}

build() {
  source_tree
  [[ -f $images/.complete ]] && { echo "previous-release: images of ${commit:0:12} cached in $images" >&2; return; }
  echo "previous-release: building ${bins[*]} of ${commit:0:12} (target $target)" >&2
  (cd "$src" && CARGO_TARGET_DIR="$target" cargo build -q --locked -p crr-operator -p crr-webhook -p crr-node-daemon)
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
