#!/usr/bin/env bash
# Removes crr from the local test bed (the reverse of hack/install.sh). Requests go first, while
# the operator still runs to release their readiness holds (finalizers); then everything the
# overlay installed, the CRD included.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"
kubectl() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
if kubectl get crd containerrecreaterequests.apps.kruise.io >/dev/null 2>&1; then
  kubectl delete containerrecreaterequests.apps.kruise.io --all -A --timeout=60s >/dev/null || true
fi
kubectl delete -k "$here/../manifests/overlays/local" --ignore-not-found --wait=true --timeout=180s >/dev/null
echo "uninstall: crr removed" >&2
