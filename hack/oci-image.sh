#!/usr/bin/env bash
# Writes a single-layer OCI image archive from a root filesystem folder,
# without a daemon or a registry: the layer is a reproducible tar (sorted
# names, epoch mtimes, root owner), the config and manifest are written by
# hand, and index.json names the image so `ctr images import` tags it.
#
#   [OCI_USER=UID:GID] hack/oci-image.sh ROOTFS NAME:TAG OUT.tar ENTRYPOINT [ARG...]
# OCI_USER sets the image's default user (none: root, as the base images here run).
set -euo pipefail
(( $# >= 4 )) || { echo "usage: $0 ROOTFS NAME:TAG OUT.tar ENTRYPOINT [ARG...]" >&2; exit 2; }
rootfs="$1" ref="$2" out="$3"; shift 3

json_array() {
  local first=1 s
  printf '['
  for s in "$@"; do
    (( first )) || printf ','
    first=0
    s="${s//\\/\\\\}"; s="${s//\"/\\\"}"
    printf '"%s"' "$s"
  done
  printf ']'
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/blobs/sha256"

tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$work/layer.tar" .
layer_digest="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
layer_size="$(stat -c %s "$work/layer.tar")"
mv "$work/layer.tar" "$work/blobs/sha256/$layer_digest"

user_field=""
[[ -n "${OCI_USER:-}" ]] && user_field="\"User\":\"$OCI_USER\","
printf '{"architecture":"amd64","os":"linux","config":{%s"Entrypoint":%s,"Env":["PATH=/usr/local/bin:/usr/bin:/bin"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$user_field" "$(json_array "$@")" "$layer_digest" > "$work/config.json"
config_digest="$(sha256sum "$work/config.json" | cut -d' ' -f1)"
config_size="$(stat -c %s "$work/config.json")"
mv "$work/config.json" "$work/blobs/sha256/$config_digest"

printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
  "$config_digest" "$config_size" "$layer_digest" "$layer_size" > "$work/manifest.json"
manifest_digest="$(sha256sum "$work/manifest.json" | cut -d' ' -f1)"
manifest_size="$(stat -c %s "$work/manifest.json")"
mv "$work/manifest.json" "$work/blobs/sha256/$manifest_digest"

printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest_digest" "$manifest_size" "$ref" "${ref##*:}" > "$work/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' > "$work/oci-layout"

tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" -cf "$out" oci-layout index.json blobs
echo "oci-image: $ref -> $out (layer $(( layer_size / 1024 )) KiB)"
