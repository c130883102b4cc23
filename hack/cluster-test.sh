#!/usr/bin/env bash
# The cluster half of `make test`: brings the local test bed up (unless one
# already runs), proves it with the smoke test, runs every crate's cluster
# tests against it, adds a second node, installs crr from manifests/ (hack/install.sh) and runs
# the end-to-end suite, the rollout suite, the trigger suite, the multi-node suite, the metrics suite (a real Prometheus), the fault suite
# (make chaos), the upgrade from the previous release (make upgrade) and the migration
# from OpenKruise, then takes down what it started. Cluster tests and e2e
# scenarios are ignored by a plain `cargo test`; `--include-ignored` runs them
# here, and a missing test bed then fails them (tests/testbed/src/lib.rs).
#
# `hack/cluster-test.sh --compat` is the compatibility leg instead (`make compat-test`, the last
# step of `make test`): on the oldest supported stack (CRR_COMPAT_STACK, hack/versions.sh) a test
# bed of its own comes up, crr is installed from manifests/, the end-to-end suite and the fault
# suite's containerd-restart scenario run, and the test bed is taken down.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
if [[ "${1:-}" == --compat ]]; then
  export CRR_STACK="$CRR_COMPAT_STACK"
  . "$here/versions.sh"
fi
. "$here/cluster-env.sh"

compat_leg() {
  if [[ -d "$CLUSTER_DIR/pids" ]] && kubectl get --raw /readyz >/dev/null 2>&1; then
    echo "cluster-test --compat: a test bed already runs in $CLUSTER_DIR (stack $(cat "$CLUSTER_DIR/stack" 2>/dev/null || echo unknown));" \
      "the compatibility leg needs one of its own on stack $CRR_STACK: run hack/cluster.sh down first" >&2
    exit 1
  fi
  local begun=$SECONDS
  trap 'rc=$?; (( rc == 0 )) || echo "cluster-test --compat: failed; daemon logs are in $CLUSTER_DIR/logs" >&2; "$here/cluster.sh" down; exit $rc' EXIT
  echo "cluster-test --compat: stack $CRR_STACK (Kubernetes $KUBE_VERSION, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION)"
  CRR_NODES="${CRR_TEST_NODES:-2}" "$here/cluster.sh" up
  "$here/install.sh"
  export KUBECONFIG="$KUBECONFIG_ADMIN"
  cargo build -p kubectl-crr  # the plugin scenarios run it
  cargo test -p crr-e2e --test e2e -- --include-ignored
  cargo test -p crr-e2e --test chaos -- --include-ignored containerd-restart
  echo "cluster-test --compat: stack $CRR_STACK passed in $(( SECONDS - begun ))s"
}
if [[ "${1:-}" == --compat ]]; then
  compat_leg
  exit 0
fi

started_here=0
if ! kubectl get --raw /readyz >/dev/null 2>&1; then
  "$here/cluster.sh" up
  started_here=1
fi
finish() {
  local rc=$?
  if (( rc != 0 )); then
    echo "cluster-test: failed; daemon logs are in $CLUSTER_DIR/logs" >&2
    if [[ "${CI:-}" == true ]]; then
      for f in "$CLUSTER_DIR"/logs/*.log; do echo "--- $f"; tail -n 20 "$f"; done >&2
      # Last, so that CI's tail shows it: what the machine had left.
      { echo "--- disk and memory"; df -h / "$CLUSTER_DIR" 2>/dev/null; free -m; } >&2
    fi
  fi
  "$here/prometheus.sh" down || true
  if (( started_here )) && [[ "${CRR_KEEP_CLUSTER:-}" != 1 ]]; then "$here/cluster.sh" down; fi
  exit "$rc"
}
trap finish EXIT

"$here/cluster-smoke.sh"
# Each crate's cluster tests run its component alone: an installed crr (webhook, operator)
# would act on their objects too.
if kubectl get namespace crr-system >/dev/null 2>&1; then
  "$here/uninstall.sh"
fi
export KUBECONFIG="$KUBECONFIG_ADMIN"
cargo build -p crr-operator  # the node daemon's cluster test runs it when no crr is installed
cargo test --workspace --test '*cluster*' -- --include-ignored
# crr itself runs on several nodes: a second node joins the running test bed (as a node joins a
# cluster), then crr is installed on both (CRR_TEST_NODES, 2 by default).
CRR_NODES="${CRR_TEST_NODES:-2}" "$here/cluster.sh" up
"$here/install.sh"
# A real Prometheus (Debian's, monitoring/prometheus.yml) scrapes crr's pods while the suites run;
# the metrics suite then asks it what it saw.
"$here/prometheus.sh" up
cargo build -p kubectl-crr  # the plugin scenarios run it
cargo test -p crr-e2e --test e2e -- --include-ignored
# ContainerRecreateRollouts: whole workloads restarted in place within maxUnavailable and their
# PDBs (tests/e2e/tests/rollouts.rs), on the same two nodes.
cargo test -p crr-e2e --test rollouts -- --include-ignored
# Triggers: a ConfigMap's data change restarts in place only the containers that use it (not a
# label edit, not an operator restart), and a schedule starts rollouts and skips an overlapping
# tick (tests/e2e/tests/triggers.rs).
cargo test -p crr-e2e --test triggers -- --include-ignored
# Across nodes: a request per node, a rolling batch, a node lost mid-recreate, a node that joins
# late (tests/e2e/tests/nodes.rs; it leaves a third node in the test bed).
cargo test -p crr-e2e --test nodes -- --include-ignored
# Every documented metric family, and every metric the alerts and the dashboard query, has a
# series in that Prometheus; the recreate histogram counts each completed request once
# (tests/e2e/tests/metrics.rs).
cargo test -p crr-e2e --test metrics -- --include-ignored
"$here/prometheus.sh" down
# The fault suite last: it restarts the apiserver and containerd and SIGKILLs crr's processes
# (tests/e2e/tests/chaos.rs; `make chaos` runs it alone).
cargo test -p crr-e2e --test chaos -- --include-ignored
# `helm upgrade` from the previous release (CRR_PREVIOUS_RELEASE, hack/previous-release.sh) to the
# working tree by docs/upgrading.md, with requests waiting in their unready grace; it reinstalls
# crr with hack/install.sh at the end (tests/e2e/tests/upgrade.rs; `make upgrade` runs it alone).
cargo test -p crr-e2e --test upgrade -- --include-ignored
# The switch from OpenKruise by the commands of docs/migrating-from-openkruise.md: it removes crr,
# stands in OpenKruise, and installs crr again with Helm and kustomize (tests/e2e/tests/migration.rs).
cargo test -p crr-e2e --test migration -- --include-ignored
