#!/usr/bin/env bash
# The README's first command, after the cluster is up and crr installed: a Deployment with two
# containers, a ContainerRecreateRequest for one of them, and the proof that only that
# container was recreated in place.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"
ns=crr-demo
say() { printf '\n\033[1mdemo: %s\033[0m\n' "$*"; }

kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$ns" delete containerrecreaterequests.apps.kruise.io --all --wait=false >/dev/null 2>&1 || true
say "a Deployment whose pod has two containers, app and sidecar (opted in to the readiness gate)"
kubectl -n "$ns" apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web, crr.apps.kruise.io/readiness-gate: "true"}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: app
        image: crr.local/busybox:1.35
        command: ["sh", "-c", "echo app started; trap 'exit 0' TERM; while true; do sleep 1; done"]
        readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
        lifecycle:
          preStop: {exec: {command: ["sh", "-c", "echo preStop ran at $(date) >> /data/log"]}}
        volumeMounts: [{name: data, mountPath: /data}]
      - name: sidecar
        image: crr.local/busybox:1.35
        command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
        volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, emptyDir: {}}]
YAML
kubectl -n "$ns" rollout status deployment/web --timeout=120s
pod="$(kubectl -n "$ns" get pod -l app=web -o jsonpath='{.items[0].metadata.name}')"
show() {
  kubectl -n "$ns" get pod "$pod" -o \
    'custom-columns=POD:.metadata.name,IP:.status.podIP,CONTAINER:.status.containerStatuses[*].name,RESTARTS:.status.containerStatuses[*].restartCount,ID:.status.containerStatuses[*].containerID' |
    sed 's/containerd:\/\/\([0-9a-f]\{12\}\)[0-9a-f]*/\1…/g'
}
say "before"
show

say "kubectl apply: a ContainerRecreateRequest for container app (v1alpha1, as upstream's docs write it)"
kubectl -n "$ns" apply -f - <<YAML
apiVersion: apps.kruise.io/v1alpha1
kind: ContainerRecreateRequest
metadata: {name: recreate-app}
spec:
  podName: $pod
  containers:
  - name: app
  strategy:
    failurePolicy: Fail
    unreadyGracePeriodSeconds: 2
    minStartedSeconds: 1
  ttlSecondsAfterFinished: 600
YAML
kubectl -n "$ns" get containerrecreaterequests.apps.kruise.io recreate-app -o wide
kubectl -n "$ns" wait containerrecreaterequests.apps.kruise.io/recreate-app --for=jsonpath='{.status.phase}'=Completed --timeout=120s
kubectl -n "$ns" rollout status deployment/web --timeout=60s >/dev/null

say "after: same pod and IP, app has a new container ID and restartCount 1, sidecar untouched"
show
say "the request (v1beta1 view)"
kubectl -n "$ns" get containerrecreaterequests.apps.kruise.io recreate-app -o jsonpath='{.status}' | sed 's/,"/,\n  "/g'; echo
say "preStop ran in the old container before it was stopped (emptyDir kept):"
kubectl -n "$ns" exec "$pod" -c sidecar -- cat /data/log
say "done. Explore: eval \"\$(hack/cluster.sh env)\"; kubectl -n $ns get crr,pods"
