#!/usr/bin/env bash
# Writes hack/k8s/vMAJOR.MINOR/go.mod for one Kubernetes release: requires k8s.io/kubernetes at
# that version and etcd's server at the version that release itself depends on, replaces every
# staging module k8s.io/* by its v0.X.Y (as upstream's own go.mod points them at ./staging), then
# `go mod tidy`. Usage: hack/k8s/pin.sh v1.37.2. hack/build-kube.sh builds from the result.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${1:?usage: pin.sh v1.X.Y}"
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "pin.sh: $version is not v1.X.Y" >&2; exit 2; }
minor="${BASH_REMATCH[1]}"; staging="v0.${minor}.${BASH_REMATCH[2]}"
dir="$here/v1.$minor"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
upstream_mod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
etcd="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$upstream_mod")"
go_line="$(awk '$1 == "go" { print $2; exit }' "$upstream_mod")"
mkdir -p "$dir"
{
  echo "// The test bed's Kubernetes $version, built from upstream's Go modules (hack/README.md)."
  echo "// Written by hack/k8s/pin.sh $version: do not edit by hand."
  echo "module crr.local/hack/k8s/v1.$minor"
  echo
  echo "go $go_line"
  echo
  echo "require ("
  echo "	go.etcd.io/etcd/server/v3 $etcd"
  echo "	k8s.io/kubernetes $version"
  echo ")"
  echo
  echo "replace ("
  grep -E '^\s+k8s\.io/[^ ]+ => \./staging/' "$upstream_mod" | awk -v v="$staging" '{ printf "\t%s => %s %s\n", $1, $1, v }'
  echo ")"
} > "$dir/go.mod"
cat > "$dir/tools.go" <<'GO'
//go:build tools

// Package tools names the upstream programs the test bed builds, so that `go mod tidy` records
// every module they need in go.sum. Written by hack/k8s/pin.sh.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
rm -f "$dir/go.sum"
(cd "$dir" && go mod tidy)
echo "pin.sh: $dir/go.mod requires k8s.io/kubernetes $version and etcd $etcd"
