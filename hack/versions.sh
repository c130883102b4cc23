# Versions of the local test bed, in one place. Sourced by the hack/ scripts.
#
# A stack is a Kubernetes release and the container runtime it runs on. CRR_STACK chooses one of
# the supported stacks (README.md, "Supported versions"); the newest is the default, and it is the
# one `make demo` and the whole `make test` run on. `.ci/run` also runs a compatibility leg on the
# oldest (hack/cluster-test.sh --compat).
#   1.37: Kubernetes v1.37, containerd 2.4 and the runc containerd 2.4 itself is tested with.
#   1.35: Kubernetes v1.35 (the oldest minor upstream still supports, and the first with container
#         restart rules on by default) on containerd 2.2 (the oldest containerd minor still
#         maintained) with its runc.
# Kubernetes is built from hack/k8s/v1.MINOR/go.mod (written by hack/k8s/pin.sh), etcd at the
# version that Kubernetes release itself depends on, containerd and runc from their own Go modules
# with their own go.sum (hack/build-runtime.sh). Everything is cached in $CRR_CACHE by version.
# A running test bed remembers its stack (hack/cluster.sh up writes it), so that every later script
# (restart, install, the tests) uses that stack's binaries without being told again.
if [[ -z "${CRR_STACK:-}" && -f "${CRR_CLUSTER_DIR:-/var/lib/crr-cluster}/stack" ]]; then
  CRR_STACK="$(cat "${CRR_CLUSTER_DIR:-/var/lib/crr-cluster}/stack")"
fi
CRR_STACK="${CRR_STACK:-1.37}"
# The stack of the compatibility leg (hack/cluster-test.sh --compat, `make compat-test`): the oldest
# we support.
CRR_COMPAT_STACK=1.35
case "$CRR_STACK" in
  1.37)
    KUBE_VERSION=v1.37.2
    CONTAINERD_VERSION=v2.4.2
    RUNC_VERSION=v1.5.2        # containerd v2.4.2's script/setup/runc-version
    ;;
  1.35)
    KUBE_VERSION=v1.35.4
    CONTAINERD_VERSION=v2.2.9
    RUNC_VERSION=v1.3.6        # containerd v2.2.9's script/setup/runc-version
    # RestartAllContainers (KEP-5532) is alpha in 1.35, beta and on from 1.36: on here, so that
    # the e2e suite proves on 1.35 too that crr refuses containers whose rules would restart the
    # whole pod (a cluster that enabled it is exactly where that matters). In 1.35 it depends on
    # NodeDeclaredFeatures (alpha too): the apiserver refuses to start with one alone.
    KUBE_FEATURE_GATES=NodeDeclaredFeatures=true,RestartAllContainersOnContainerExits=true
    ;;
  *)
    echo "versions.sh: CRR_STACK=$CRR_STACK is not a supported stack (1.37, 1.35)" >&2
    return 2 2>/dev/null || exit 2
    ;;
esac
# The control plane's --feature-gates and the kubelets' featureGates (hack/cluster.sh).
KUBE_FEATURE_GATES="${KUBE_FEATURE_GATES:-}"
KUBE_MINOR="${KUBE_VERSION#v1.}"; KUBE_MINOR="${KUBE_MINOR%%.*}"
KUBE_GOMOD_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/k8s/v1.$KUBE_MINOR"
# etcd: the server version that Kubernetes release itself requires (its go.mod, pinned in ours).
ETCD_VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$KUBE_GOMOD_DIR/go.mod" 2>/dev/null)"
CRR_CACHE="${CRR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crr}"
KUBE_BIN="$CRR_CACHE/kube-$KUBE_VERSION"
RUNTIME_BIN="$CRR_CACHE/containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION"
# containerd finds its shim, and the shim runc, on PATH; scripts and tests call ctr.
case ":$PATH:" in *":$RUNTIME_BIN:"*) ;; *) PATH="$RUNTIME_BIN:$PATH" ;; esac
# Helm: renders manifests/helm/crr in tests and installs it in the migration and upgrade suites.
HELM_VERSION=v3.18.6
HELM_BIN="$CRR_CACHE/helm-$HELM_VERSION"
# cargo-deny, the dependency policy check (deny.toml; hack/cargo-deny.sh installs it with cargo).
CARGO_DENY_VERSION=0.20.2
CARGO_DENY_ROOT="$CRR_CACHE/cargo-deny-$CARGO_DENY_VERSION"
# cargo-cyclonedx, the SBOMs of the images (hack/sbom.sh installs it with cargo).
CARGO_CYCLONEDX_VERSION=0.5.9
CARGO_CYCLONEDX_ROOT="$CRR_CACHE/cargo-cyclonedx-$CARGO_CYCLONEDX_VERSION"
# cargo-fuzz, for `make fuzz` (hack/fuzz.sh installs it with cargo; not part of make test).
CARGO_FUZZ_VERSION=0.13.2
CARGO_FUZZ_ROOT="$CRR_CACHE/cargo-fuzz-$CARGO_FUZZ_VERSION"
# kwok: simulated nodes for the scale bench (bench/scale.sh).
KWOK_VERSION=v0.7.0
KWOK_BIN="$CRR_CACHE/kwok-$KWOK_VERSION"
# The previous release of crr, for the upgrade test (tests/e2e/tests/upgrade.rs, docs/upgrading.md;
# hack/previous-release.sh builds its images). There are no release tags yet: it is the commit
# recorded here, 5e441ec (the last commit whose CI passed before the chart gained
# values.schema.json, NOTES.txt and helm test). Bump it at each release to the commit released,
# or to the release's tag once releases are tagged (`git rev-parse <tag>^{commit}`).
CRR_PREVIOUS_RELEASE=5e441ec728a3b18630215e80ba1ac68dcf590cfb
