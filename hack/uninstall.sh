#!/usr/bin/env bash
# Removes crr from the local test bed (the reverse of hack/install.sh). Requests go first, while
# the operator still runs to release their readiness holds (finalizers); then everything the
# overlay installed, the CRD included.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"
if kubectl get crd containerrecreaterequests.apps.kruise.io >/dev/null 2>&1; then
  kubectl delete containerrecreaterequests.apps.kruise.io --all -A --timeout=60s >/dev/null || true
  # Requests whose finalizer no operator is left to remove (crr was not running, or another
  # implementation's): removed by hand, or the CRD's deletion below would wait for them forever.
  for leftover in $(kubectl get containerrecreaterequests.apps.kruise.io -A -o 'jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{" "}{end}'); do
    echo "uninstall: removing the finalizers of $leftover (no operator released them)" >&2
    kubectl -n "${leftover%%/*}" patch containerrecreaterequests.apps.kruise.io "${leftover#*/}" \
      --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null || true
  done
fi
kubectl delete -k "$here/../manifests/overlays/local" --ignore-not-found --wait=true --timeout=180s >/dev/null
echo "uninstall: crr removed" >&2
