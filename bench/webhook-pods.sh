#!/usr/bin/env bash
# Memory against the number of pods in the cluster (the first finding at scale: the webhook was
# OOM-killed at 5,000 pods). On the local test bed with crr installed (release build), it
# creates CRR_PODS (5000) two-container pods with server-side apply, left unschedulable (a
# nodeSelector no node has: they sit in the API server and run nowhere, as in the report), and
# samples the RSS of every crr process at each step. Then it recreates a container of a real
# running pod through a CRR, to show the system still works with those pods present, and runs
# `pod-cache-cost` to show where a full pod cache's memory would go.
#   CRR_PODS=5000 CRR_POD_STEPS="0 1000 3000 5000" bench/webhook-pods.sh
# Results: bench/results/<date>-pods.md (and printed). Everything it creates is deleted at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/hack/versions.sh"
. "$root/hack/cluster-env.sh"
steps="${CRR_POD_STEPS:-0 1000 3000 ${CRR_PODS:-5000}}"
ns=crr-bench-pods
settle="${CRR_POD_SETTLE_SECONDS:-20}"
out="$root/bench/results/$(date -u +%Y-%m-%dT%H%M)-pods.md"
log() { echo "webhook-pods: $*" >&2; }

if [[ "${CRR_BENCH_SKIP_INSTALL:-}" != 1 ]]; then
  "$root/hack/cluster.sh" up
  CRR_PROFILE=release "$root/hack/install.sh"
fi
cd "$root"
cargo build -q --release -p crr-e2e --bin pod-cache-cost

cleanup() {
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
work="$(mktemp -d)"
trap cleanup EXIT
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null

# One pod: two containers, ports, probes, env and resources, about 6 KiB of JSON once the API
# server has filled in its defaults (managedFields aside).
pod_yaml() {
  local name=$1
  cat <<YAML
---
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: $ns
  labels: {app: bench-pods, tier: backend, release: stable, shard: "s${name: -1}"}
  annotations: {bench.crr/purpose: "unschedulable pod that only sits in the API server"}
spec:
  nodeSelector: {crr.bench/nowhere: "true"}
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: crr.local/busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    ports: [{name: http, containerPort: 8080}, {name: metrics, containerPort: 9090}]
    env: [{name: MODE, value: production}, {name: LOG_LEVEL, value: info}, {name: REGION, value: local},
          {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {memory: 64Mi}}
    readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 5}
    livenessProbe: {tcpSocket: {port: http}, periodSeconds: 10}
    lifecycle: {preStop: {exec: {command: ["sh", "-c", "sleep 1"]}}}
  - name: sidecar
    image: crr.local/busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    ports: [{name: admin, containerPort: 15000}]
    env: [{name: SIDECAR_MODE, value: proxy}]
    resources: {requests: {cpu: 5m, memory: 8Mi}}
YAML
}

# RSS of each crr process, in MiB ("name=MiB" words, one per process).
rss() {
  local name pid
  for name in crr-webhook crr-operator crr-node-daemon; do
    for pid in $(pgrep -x "$name" || true); do
      awk -v n="$name" '/^VmRSS/ {printf "%s=%.1f ", n, $2/1024}' "/proc/$pid/status"
    done
  done
}

# Creates pods up to $1 in total, 4 kubectl processes at once, 250 objects per file.
created=0
create_up_to() {
  local target=$1 batch=250 shard=0 first
  while (( created < target )); do
    first=$created
    local last=$(( first + batch < target ? first + batch : target ))
    for (( i = first; i < last; i++ )); do pod_yaml "p$i"; done > "$work/shard$shard.yaml"
    kubectl apply --server-side --field-manager bench -f "$work/shard$shard.yaml" >/dev/null &
    created=$last
    shard=$(( shard + 1 ))
    if (( shard % 4 == 0 )); then wait; fi
  done
  wait
}

{
  echo "# Memory against pods in the cluster ($(date -u +%Y-%m-%d), $(git rev-parse --short HEAD))"
  echo
  echo "Unschedulable two-container pods created with server-side apply; RSS of every crr process"
  echo "${settle} s after each step (two webhook replicas)."
  echo
  echo "| pods | RSS (MiB) |"
  echo "|---|---|"
} > "$out"
for step in $steps; do
  log "creating pods up to $step"
  create_up_to "$step"
  sleep "$settle"
  last_rss="$(rss)"
  log "$step pods: $last_rss"
  echo "| $step | $last_rss |" >> "$out"
done
restarts="$(kubectl -n crr-system get pods -o 'jsonpath={range .items[*]}{.metadata.name}={.status.containerStatuses[0].restartCount} {end}')"
echo >> "$out"
echo "crr pods' restart counts at the end (an OOM kill shows here): $restarts" >> "$out"

# The system still works: a CRR on a real running pod completes.
log "a CRR on a running pod, beside $created pending pods"
kubectl -n "$ns" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: live}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: crr.local/busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done"]
YAML
kubectl -n "$ns" wait pod/live --for=condition=Ready --timeout=120s >/dev/null
started=$(date +%s%N)
kubectl -n "$ns" create -f - >/dev/null <<'YAML'
apiVersion: apps.kruise.io/v1alpha1
kind: ContainerRecreateRequest
metadata: {name: live-app}
spec:
  podName: live
  containers: [{name: app}]
  strategy: {minStartedSeconds: 0}
  activeDeadlineSeconds: 120
YAML
kubectl -n "$ns" wait containerrecreaterequests.apps.kruise.io/live-app \
  --for=jsonpath='{.status.phase}'=Completed --timeout=120s >/dev/null
took=$(( ($(date +%s%N) - started) / 1000000 ))
restarts_live="$(kubectl -n "$ns" get pod live -o 'jsonpath={.status.containerStatuses[0].restartCount}')"
log "CRR Completed in ${took} ms (restartCount $restarts_live)"
{
  echo "A CRR on a running pod beside $created pending pods: Completed in ${took} ms, restartCount $restarts_live."
  echo
  echo "Where a full pod cache's memory would go (\`pod-cache-cost\`, on these pods):"
  echo
  KUBECONFIG="$KUBECONFIG_ADMIN" "$root/target/release/pod-cache-cost"
} >> "$out"
cp "$out" "$root/bench/results/latest-pods.md"
cat "$out"
