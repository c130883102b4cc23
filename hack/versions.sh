# Versions of the local test bed, in one place. Sourced by the hack/ scripts.
# Kubernetes: the oldest minor our k8s-openapi feature (v1_33) targets, latest patch.
KUBE_VERSION=v1.33.13
# etcd: the server version Kubernetes v1.33 itself depends on (hack/k8s/go.mod).
ETCD_VERSION=v3.5.21
CRR_CACHE="${CRR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crr}"
KUBE_BIN="$CRR_CACHE/kube-$KUBE_VERSION"
# Helm: renders manifests/helm/crr in tests; v3.18 is built on the same k8s.io v0.33 modules.
HELM_VERSION=v3.18.6
HELM_BIN="$CRR_CACHE/helm-$HELM_VERSION"
# kwok: simulated nodes for the scale bench (bench/scale.sh); v0.7 is built on k8s.io v0.33.
KWOK_VERSION=v0.7.0
KWOK_BIN="$CRR_CACHE/kwok-$KWOK_VERSION"
