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
# The previous release of crr, for the upgrade test (tests/e2e/tests/upgrade.rs, docs/upgrading.md;
# hack/previous-release.sh builds its images). There are no release tags yet: it is the commit
# recorded here, 5e441ec (the last commit whose CI passed before the chart gained
# values.schema.json, NOTES.txt and helm test). Bump it at each release to the commit released,
# or to the release's tag once releases are tagged (`git rev-parse <tag>^{commit}`).
CRR_PREVIOUS_RELEASE=5e441ec728a3b18630215e80ba1ac68dcf590cfb
