#!/usr/bin/env bash
# Captures the objects tests/e2e/tests/gitops.rs runs Argo CD's health checks on, from the test
# bed with crr installed (hack/cluster.sh up, hack/install.sh): requests and rollouts in each state
# the checks tell apart, written to tests/e2e/tests/fixtures/gitops/<Health>-<what>.json, each
# named after the health Argo CD must show. Runs in its own namespace, deleted at the end.
#   hack/capture-gitops-fixtures.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/hack/versions.sh"
. "$root/hack/cluster-env.sh"
export PATH="$KUBE_BIN:$PATH" KUBECONFIG="$KUBECONFIG_ADMIN"
out="$root/tests/e2e/tests/fixtures/gitops"
ns=gitops-capture
log() { echo "capture-gitops-fixtures: $*" >&2; }
k() { kubectl -n "$ns" "$@"; }
# An object as Argo CD holds it: no managedFields (Argo CD drops them too).
save() { # save FILE KIND NAME
  k get "$2" "$3" -o json | jq 'del(.metadata.managedFields)' > "$out/$1"
  log "$1: $(jq -r '.status.phase // "no phase"' "$out/$1")"
}
wait_for() { # wait_for KIND NAME JQ-CONDITION
  for _ in $(seq 120); do
    if k get "$1" "$2" -o json 2>/dev/null | jq -e "$3" >/dev/null; then return 0; fi
    sleep 1
  done
  log "$1 $2 never met $3"; return 1
}
trap 'kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true' EXIT
kubectl delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "$ns" >/dev/null
rm -f "$out"/*.json
k apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 3
      containers:
      - name: app
        image: crr.local/busybox:1.35
        imagePullPolicy: Never
        command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 1 & wait \$!; done"]
        readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
EOF
k rollout status deployment/web --timeout=120s >/dev/null
mapfile -t pods < <(k get pods -l app=web -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
request() { # request NAME POD STRATEGY DEADLINE
  k apply -f - >/dev/null <<EOF
apiVersion: apps.kruise.io/v1beta1
kind: ContainerRecreateRequest
metadata: {name: $1}
spec:
  podName: $2
  containers: [{name: app}]
  strategy: $3
  activeDeadlineSeconds: $4
EOF
}
# A request that succeeds, seen in both versions.
request recreated "${pods[0]}" '{failurePolicy: Fail}' 300
wait_for containerrecreaterequests recreated '.status.phase == "Completed"'
save Healthy-request-v1beta1-succeeded.json containerrecreaterequests.v1beta1.apps.kruise.io recreated
save Healthy-request-v1alpha1-completed.json containerrecreaterequests.v1alpha1.apps.kruise.io recreated
# One in its unready grace period: picked up, not recreated yet.
request draining "${pods[1]}" '{unreadyGracePeriodSeconds: 60}' 120
wait_for containerrecreaterequests draining '.status.phase == "Recreating"'
save Progressing-request-v1beta1-recreating.json containerrecreaterequests.v1beta1.apps.kruise.io draining
# One whose deadline ends it before its grace period does: completed, nothing recreated.
request late "${pods[2]}" '{unreadyGracePeriodSeconds: 30}' 5
wait_for containerrecreaterequests late '.status.phase == "Completed"'
save Degraded-request-v1beta1-failed.json containerrecreaterequests.v1beta1.apps.kruise.io late
save Degraded-request-v1alpha1-deadline.json containerrecreaterequests.v1alpha1.apps.kruise.io late
k delete containerrecreaterequests draining --wait=true >/dev/null

rollout() { # rollout NAME KIND TARGET EXTRA
  k apply -f - >/dev/null <<EOF
apiVersion: crr.dev/v1alpha1
kind: ContainerRecreateRollout
metadata: {name: $1}
spec:
  target: {workloadRef: {apiVersion: apps/v1, kind: $2, name: $3}}
  containers: [app]
  $4
EOF
}
rollout done Deployment web 'maxUnavailable: 3'
wait_for containerrecreaterollouts done '.status.phase == "Completed"'
save Healthy-rollout-completed.json containerrecreaterollouts done
rollout waiting Deployment web 'paused: true'
wait_for containerrecreaterollouts waiting '.status.phase == "Paused"'
save Suspended-rollout-paused.json containerrecreaterollouts waiting
k delete containerrecreaterollouts waiting --wait=true >/dev/null
# Held by a budget that allows nothing.
k apply -f - >/dev/null <<EOF
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec: {maxUnavailable: 0, selector: {matchLabels: {app: web}}}
EOF
rollout held Deployment web ''
wait_for containerrecreaterollouts held '.status.conditions[]? | select(.type == "Progressing" and .reason == "WaitingForBudget")'
save Progressing-rollout-running.json containerrecreaterollouts held
# Another, aborted while the budget holds it: nothing started, it ends Aborted at once.
rollout stopped Deployment web ''
wait_for containerrecreaterollouts stopped '.status.conditions[]? | select(.type == "Progressing" and .reason == "WaitingForBudget")'
k patch containerrecreaterollouts stopped --type=merge -p '{"spec":{"aborted":true}}' >/dev/null
wait_for containerrecreaterollouts stopped '.status.phase == "Aborted"'
save Degraded-rollout-aborted.json containerrecreaterollouts stopped
# The same, its spec edited and not observed yet (a copy with the next generation: a moment the
# bed cannot hold still).
jq '.metadata.generation += 1 | .spec.paused = true' "$out/Progressing-rollout-running.json" \
  > "$out/Progressing-rollout-spec-not-observed.json"
# Not reconciled yet: as created, without a status.
k create -f - -o json --dry-run=server <<EOF | jq 'del(.metadata.managedFields)' > "$out/Progressing-rollout-new.json"
apiVersion: crr.dev/v1alpha1
kind: ContainerRecreateRollout
metadata: {name: new}
spec:
  target: {workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web}}
  containers: [app]
EOF
k create -f - -o json --dry-run=server <<EOF | jq 'del(.metadata.managedFields)' > "$out/Progressing-request-v1beta1-new.json"
apiVersion: apps.kruise.io/v1beta1
kind: ContainerRecreateRequest
metadata: {name: new}
spec:
  podName: ${pods[0]}
  containers: [{name: app}]
EOF
# Its workload deleted while it waited: it ends Failed (TargetGone).
k delete deployment web --wait=false >/dev/null
wait_for containerrecreaterollouts held '.status.phase == "Failed"'
save Degraded-rollout-failed.json containerrecreaterollouts held
log "wrote $(ls "$out" | wc -l) objects to $out"
