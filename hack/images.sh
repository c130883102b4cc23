#!/usr/bin/env bash
# Builds the test bed's images locally and imports them into the cluster's
# containerd (namespace k8s.io), since there is no registry:
#   crr.local/pause:3.10     the sandbox image (hack/images/pause.c, static)
#   crr.local/busybox:1.35   Debian's static busybox, for test pods
#   crr.local/curl:7.88      the same with Debian's curl, for the chart's helm test
#   crr.local/<bin>:dev      each Rust binary of ours named in $CRR_IMAGES ($CRR_IMAGE_TAG: dev)
# Usage: hack/images.sh base | hack/images.sh crr BIN... | hack/images.sh archive DIR BIN... |
#        hack/images.sh sync
#   archive: the images of BIN... as OCI archives in DIR only, nothing imported (no test bed
#            needed; hack/previous-release.sh builds the previous release's images this way)
#   sync: every image built before (in the cache) into every node, for a node that joins later
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"

out="$CRR_CACHE/images"
mkdir -p "$out"

# Into every node's containerd (hack/cluster-env.sh: node_sockets).
import() {
  local socket
  for socket in $(node_sockets); do
    ctr --address "$socket" -n k8s.io images import "$1" >/dev/null
  done
  echo "images: imported $2"
}

# Copies an ELF program and the shared libraries it loads into ROOTFS.
copy_with_libs() {
  local bin="$1" rootfs="$2" dest="$3" lib
  install -D -m 0755 "$bin" "$rootfs$dest"
  for lib in $(ldd "$bin" 2>/dev/null | grep -oE '/[^ ]+' | sort -u); do
    install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
  done
}

build_base() {
  local rootfs
  rootfs="$(mktemp -d)"
  gcc -O2 -static -s -o "$rootfs/pause" "$here/images/pause.c"
  "$here/oci-image.sh" "$rootfs" crr.local/pause:3.10 "$out/pause.tar" /pause
  rm -rf "$rootfs"

  rootfs="$(mktemp -d)"
  busybox_rootfs "$rootfs"
  "$here/oci-image.sh" "$rootfs" crr.local/busybox:1.35 "$out/busybox.tar" /bin/sh
  # The chart's helm test image: busybox with Debian's curl (OpenSSL 3). busybox's own TLS
  # client sends no signature_algorithms, which API servers built with Go >= 1.25 refuse
  # ("missing signature_algorithms from TLS 1.2 peer"): Kubernetes 1.35 and later.
  copy_with_libs /usr/bin/curl "$rootfs" /usr/bin/curl
  "$here/oci-image.sh" "$rootfs" crr.local/curl:7.88 "$out/curl.tar" /bin/sh
  rm -rf "$rootfs"

  import "$out/pause.tar" crr.local/pause:3.10
  import "$out/busybox.tar" crr.local/busybox:1.35
  import "$out/curl.tar" crr.local/curl:7.88
}

# Debian's static busybox and its applets in ROOTFS, with root and nobody in /etc/passwd.
busybox_rootfs() {
  local rootfs="$1" applet
  mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/etc"
  cp /bin/busybox "$rootfs/bin/busybox"
  for applet in $("$rootfs/bin/busybox" --list); do
    [[ -e "$rootfs/bin/$applet" ]] || ln -s busybox "$rootfs/bin/$applet"
  done
  echo 'root:x:0:0:root:/:/bin/sh' > "$rootfs/etc/passwd"
  echo 'nobody:x:65534:65534:nobody:/:/bin/false' >> "$rootfs/etc/passwd"
}

tag="${CRR_IMAGE_TAG:-dev}"

# The image crr.local/<file name>:$tag of each built binary, as DIR/<file name>.tar. An archive
# made from the same binary with the same tag is kept (DIR/<file name>.tar.from holds the binary's
# checksum and the tag): both stacks' test beds, and every install of a run, share one image per
# build.
archive_crr() {
  local dir="$1" bin name rootfs from
  shift
  mkdir -p "$dir"
  for bin in "$@"; do
    name="$(basename "$bin")"
    from="$(sha256sum <"$bin" | cut -d' ' -f1) $tag"
    if [[ -f "$dir/$name.tar" && "$(cat "$dir/$name.tar.from" 2>/dev/null)" == "$from" ]]; then
      echo "images: crr.local/$name:$tag already made from this build"
      continue
    fi
    rm -f "$dir/$name.tar.from"
    rootfs="$(mktemp -d)"
    copy_with_libs "$bin" "$rootfs" "/usr/local/bin/$name"
    mkdir -p "$rootfs/tmp"
    # Non-root by default; the node daemon's DaemonSet chooses its user itself.
    OCI_USER=65532:65532 "$here/oci-image.sh" "$rootfs" "crr.local/$name:$tag" "$dir/$name.tar" "/usr/local/bin/$name"
    rm -rf "$rootfs"
    echo "$from" >"$dir/$name.tar.from"
  done
}

# Each argument is a built binary; its image crr.local/<file name>:$tag goes into every node.
build_crr() {
  local bin
  archive_crr "$out" "$@"
  for bin in "$@"; do
    import "$out/$(basename "$bin").tar" "crr.local/$(basename "$bin"):$tag"
  done
}

sync_all() {
  local tar
  for tar in "$out"/*.tar; do
    [[ -f $tar ]] && import "$tar" "$(basename "$tar" .tar)"
  done
  return 0
}

case "${1:-}" in
  base) build_base ;;
  crr) shift; build_crr "$@" ;;
  archive) shift; archive_crr "$@" ;;
  sync) sync_all ;;
  *) echo "usage: $0 base | crr BIN... | archive DIR BIN... | sync" >&2; exit 2 ;;
esac
