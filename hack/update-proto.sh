#!/usr/bin/env bash
# Refreshes proto/cri/runtime/v1/api.proto from k8s.io/cri-api at the version
# the test bed's Kubernetes uses (hack/k8s/go.mod), dropping the gogoproto
# import and options, which only matter to Go code generation.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
version="v0.${KUBE_VERSION#v1.}"
dir="$(cd "$here/k8s" && GOTOOLCHAIN=local go mod download -json "k8s.io/cri-api@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
out="$here/../proto/cri/runtime/v1/api.proto"
{
  echo "// From k8s.io/cri-api $version, pkg/apis/runtime/v1/api.proto (Apache-2.0),"
  echo "// with the gogoproto import and options removed. Regenerate: hack/update-proto.sh"
  grep -vE '^import "github.com/gogo/protobuf/gogoproto/gogo.proto";|^option \(gogoproto\.' "$dir/pkg/apis/runtime/v1/api.proto"
} > "$out"
echo "update-proto: wrote $out from k8s.io/cri-api $version"
