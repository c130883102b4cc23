#!/usr/bin/env bash
# Builds the pinned upstream Kubernetes components and etcd from their Go
# modules (hack/k8s/v1.MINOR/go.mod, for the stack CRR_STACK chooses: hack/versions.sh) into $KUBE_BIN. A second run with the same
# version finds the binaries there and does nothing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"

programs=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd)
missing=0
for p in "${programs[@]}"; do [[ -x "$KUBE_BIN/$p" ]] || missing=1; done
if [[ $missing == 0 ]]; then
  echo "build-kube: $KUBE_VERSION already built in $KUBE_BIN"
  exit 0
fi

grep -q "k8s.io/kubernetes $KUBE_VERSION\$" "$KUBE_GOMOD_DIR/go.mod" ||
  { echo "build-kube: $KUBE_GOMOD_DIR/go.mod does not require k8s.io/kubernetes $KUBE_VERSION (hack/versions.sh; write it with hack/k8s/pin.sh $KUBE_VERSION)" >&2; exit 1; }
command -v go >/dev/null || { echo "build-kube: go not found on PATH" >&2; exit 1; }
mkdir -p "$KUBE_BIN.partial"
cd "$KUBE_GOMOD_DIR"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=1
minor="$KUBE_MINOR"
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$KUBE_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
start=$(date +%s)
echo "build-kube: building Kubernetes $KUBE_VERSION and etcd $ETCD_VERSION (cold, modules downloaded too: about 6 min on 2 cores)"
for p in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  echo "build-kube: $p ($(( $(date +%s) - start ))s)"
  go build -trimpath -ldflags "$ldflags" -o "$KUBE_BIN.partial/$p" "k8s.io/kubernetes/cmd/$p"
done
echo "build-kube: etcd ($(( $(date +%s) - start ))s)"
go build -trimpath -ldflags "-s -w" -o "$KUBE_BIN.partial/etcd" go.etcd.io/etcd/server/v3
rm -rf "$KUBE_BIN"
mv "$KUBE_BIN.partial" "$KUBE_BIN"
echo "build-kube: done in $(( $(date +%s) - start ))s; binaries in $KUBE_BIN"
