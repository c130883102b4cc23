#!/usr/bin/env bash
# The cluster half of `make test`: brings the local test bed up (unless one
# already runs), proves it with the smoke test, runs every crate's cluster
# tests against it, adds a second node, installs crr from manifests/ (hack/install.sh) and runs
# the end-to-end suite, the rollout suite, the trigger suite, the multi-node suite, the metrics suite (a real Prometheus), the fault suite
# (make chaos), the upgrade from the previous release (make upgrade) and the migration
# from OpenKruise, then takes down what it started. Cluster tests and e2e
# scenarios are ignored by a plain `cargo test`; `--include-ignored` runs them
# here, and a missing test bed then fails them (tests/testbed/src/lib.rs). Every suite shares
# the one test bed: it is started once, grows a node, and is taken down once at the end.
#
# `hack/cluster-test.sh --compat` is the compatibility leg instead (`make compat-test`, the last
# step of `make test`): on the oldest supported stack (CRR_COMPAT_STACK, hack/versions.sh) a test
# bed of its own comes up (one test bed runs one stack: its binaries differ), crr is installed
# from manifests/, and what differs between stacks runs (COMPAT_E2E and the lists below it); the test bed is
# taken down. `hack/cluster-test.sh --compat-full` (`make compat-test-full`) runs the whole
# end-to-end suite there instead, with the same containerd restart.
#
# Each suite is a step of hack/steps.sh: `make test` prints its seconds in its table.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
mode="${1:-}"
case "$mode" in
  "" | --compat | --compat-full) ;;
  *) echo "usage: $0 [--compat | --compat-full]" >&2; exit 2 ;;
esac
if [[ -n "$mode" ]]; then
  export CRR_STACK="$CRR_COMPAT_STACK"
  . "$here/versions.sh"
fi
. "$here/cluster-env.sh"
. "$here/steps.sh"

# What the compatibility leg runs: the scenarios whose outcome depends on the kubelet, the
# container runtime or the API server's version. Scenario names match as substrings.
#   e2e: a request through v1alpha1 (simple), a preStop hook run through CRI and its deadline
#        (pre-stop, deadline-pre-stop), conversion between the versions (conversion), the
#        webhook refusing bad requests and its callers (invalid-refused, webhook-callers), and
#        every scenario on the kubelet's restart decisions (on-failure, restart-rules-*,
#        native-sidecar);
#   a rollout of a Deployment (rollout-deployment), a ConfigMap trigger (trigger-config-change),
#   containerd restarted mid-recreate (chaos containerd-restart); the install itself is
#   hack/install.sh, from manifests/.
# The rest (leader election, budgets, the plugin, metrics, upgrade, migration) is crr's own logic
# against the API, the same on both stacks: it runs on the newest stack only, and in full on the
# oldest with --compat-full.
COMPAT_E2E=(simple pre-stop conversion invalid-refused webhook-callers on-failure restart-rules native-sidecar)
COMPAT_ROLLOUTS=(rollout-deployment)
COMPAT_TRIGGERS=(trigger-config-change)

# The command that runs a suite of tests/e2e, followed by its name and filters. It is `--workspace
# --test NAME`, not `-p crr-e2e`: cargo then resolves the dependencies' features for the whole
# workspace, as `cargo test --workspace` (make unit) did, and reuses that build. With `-p crr-e2e`
# the features differ, and tokio, kube and the rest were compiled a second time (86 s cold).
suite=(cargo test --workspace --test)

# keep_bed_logs: on a failed leg, a copy of the test bed's daemon logs (and the API server's audit
# log's last lines) in target/steps/bed-logs-<leg>/, which `cluster.sh down` would otherwise remove
# with the bed: CI keeps target/ of a failed run, and the failure's cause is usually in them.
keep_bed_logs() {
  local into
  into="$(cd "$here/.." && pwd)/target/steps/bed-logs-${1}"
  rm -rf "$into" && mkdir -p "$into" || return 0
  cp -r "$CLUSTER_DIR"/logs/. "$into/" 2>/dev/null || true
  tail -n 2000 "$CLUSTER_DIR/audit/audit.log" >"$into/audit-tail.log" 2>/dev/null || true
  echo "cluster-test: the test bed's logs are kept in $into" >&2
}

compat_leg() {
  if [[ -d "$CLUSTER_DIR/pids" ]] && kubectl get --raw /readyz >/dev/null 2>&1; then
    echo "cluster-test $mode: a test bed already runs in $CLUSTER_DIR (stack $(cat "$CLUSTER_DIR/stack" 2>/dev/null || echo unknown));" \
      "the compatibility leg needs one of its own on stack $CRR_STACK: run hack/cluster.sh down first" >&2
    exit 1
  fi
  local begun=$SECONDS
  trap 'rc=$?; (( rc == 0 )) || { echo "cluster-test $mode: failed" >&2; keep_bed_logs compat; }; step "compat: test bed down" "$here/cluster.sh" down; exit $rc' EXIT
  echo "cluster-test $mode: stack $CRR_STACK (Kubernetes $KUBE_VERSION, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION)"
  CRR_NODES="${CRR_TEST_NODES:-2}" step "compat: test bed up" "$here/cluster.sh" up
  step "compat: install" "$here/install.sh"
  export KUBECONFIG="$KUBECONFIG_ADMIN"
  if [[ $mode == --compat-full ]]; then
    step "compat: e2e (all)" "${suite[@]}" e2e -- --include-ignored
  else
    step "compat: e2e (${#COMPAT_E2E[@]} filters)" "${suite[@]}" e2e -- --include-ignored "${COMPAT_E2E[@]}"
    step "compat: rollouts" "${suite[@]}" rollouts -- --include-ignored "${COMPAT_ROLLOUTS[@]}"
    step "compat: triggers" "${suite[@]}" triggers -- --include-ignored "${COMPAT_TRIGGERS[@]}"
  fi
  step "compat: chaos containerd-restart" "${suite[@]}" chaos -- --include-ignored containerd-restart
  echo "cluster-test $mode: stack $CRR_STACK passed in $(( SECONDS - begun ))s"
}
if [[ -n "$mode" ]]; then
  compat_leg
  exit 0
fi

started_here=0
if ! kubectl get --raw /readyz >/dev/null 2>&1; then
  step "test bed up" "$here/cluster.sh" up
  started_here=1
fi
finish() {
  local rc=$?
  if (( rc != 0 )); then
    echo "cluster-test: failed" >&2
    keep_bed_logs newest
    if [[ "${CI:-}" == true ]]; then
      for f in "$CLUSTER_DIR"/logs/*.log; do echo "--- $f"; tail -n 20 "$f"; done >&2
      # Last, so that CI's tail shows it: what the machine had left.
      { echo "--- disk and memory"; df -h / "$CLUSTER_DIR" 2>/dev/null; free -m; } >&2
    fi
  fi
  "$here/prometheus.sh" down || true
  if (( started_here )) && [[ "${CRR_KEEP_CLUSTER:-}" != 1 ]]; then step "test bed down" "$here/cluster.sh" down; fi
  exit "$rc"
}
trap finish EXIT

step smoke "$here/cluster-smoke.sh"
# Each crate's cluster tests run its component alone: an installed crr (webhook, operator)
# would act on their objects too.
if kubectl get namespace crr-system >/dev/null 2>&1; then
  step uninstall "$here/uninstall.sh"
fi
export KUBECONFIG="$KUBECONFIG_ADMIN"
# The node daemon's cluster test runs the operator's binary when no crr is installed, and the
# plugin scenarios run kubectl-crr: the build `cargo test --workspace` made (the same features,
# so nothing is compiled again) leaves both in cargo's target folder (debug/).
cargo test -q --workspace --no-run
step "crate cluster tests" cargo test --workspace --test '*cluster*' -- --include-ignored
# crr itself runs on several nodes: a second node joins the running test bed (as a node joins a
# cluster), then crr is installed on both (CRR_TEST_NODES, 2 by default).
CRR_NODES="${CRR_TEST_NODES:-2}" step "second node" "$here/cluster.sh" up
step install "$here/install.sh"
# A real Prometheus (Debian's, monitoring/prometheus.yml) scrapes crr's pods while the suites run;
# the metrics suite then asks it what it saw.
step "prometheus up" "$here/prometheus.sh" up
step e2e "${suite[@]}" e2e -- --include-ignored
# ContainerRecreateRollouts: whole workloads restarted in place within maxUnavailable and their
# PDBs (tests/e2e/tests/rollouts.rs), on the same two nodes.
step rollouts "${suite[@]}" rollouts -- --include-ignored
# Triggers: a ConfigMap's data change restarts in place only the containers that use it (not a
# label edit, not an operator restart), a schedule starts rollouts and skips an overlapping
# tick, and a workload's record in the annotation of an earlier release becomes its TriggerRecord
# without crr writing the workload (tests/e2e/tests/triggers.rs).
step triggers "${suite[@]}" triggers -- --include-ignored
# Across nodes: a request per node, a rolling batch, a node lost mid-recreate, a node that joins
# late (tests/e2e/tests/nodes.rs; it leaves a third node in the test bed).
step nodes "${suite[@]}" nodes -- --include-ignored
# Every documented metric family, and every metric the alerts and the dashboard query, has a
# series in that Prometheus; the recreate histogram counts each completed request once
# (tests/e2e/tests/metrics.rs).
step metrics "${suite[@]}" metrics -- --include-ignored
"$here/prometheus.sh" down
# The fault suite last: it restarts the apiserver and containerd and SIGKILLs crr's processes
# (tests/e2e/tests/chaos.rs; `make chaos` runs it alone).
step chaos "${suite[@]}" chaos -- --include-ignored
# `helm upgrade` from the previous release (CRR_PREVIOUS_RELEASE, hack/previous-release.sh) to the
# working tree by docs/upgrading.md, with requests waiting in their unready grace; it reinstalls
# crr with hack/install.sh at the end (tests/e2e/tests/upgrade.rs; `make upgrade` runs it alone).
step upgrade "${suite[@]}" upgrade -- --include-ignored
# The switch from OpenKruise by the commands of docs/migrating-from-openkruise.md: it removes crr,
# stands in OpenKruise, and installs crr again with Helm and kustomize (tests/e2e/tests/migration.rs).
step migration "${suite[@]}" migration -- --include-ignored
