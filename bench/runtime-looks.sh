#!/usr/bin/env bash
# How often the node daemons look at the container runtime for one recreate: CRI ListContainers
# and ContainerStatus calls per request, from the daemons' own metrics, for 10 requests at once
# (one a pod, two nodes), first plain, then with minStartedSeconds 10 (a recreate in flight for
# 10 s). Before the daemon followed the runtime's container events it looked every 500 ms while a
# recreate was in flight (docs/decisions.md, "The runtime's container events").
#   bench/runtime-looks.sh            the installed build (CRR_PROFILE=dev: the dev build)
# Prints a table; results go to BENCHMARKS.md by hand.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/hack/versions.sh"
. "$root/hack/cluster-env.sh"
"$root/hack/cluster.sh" up >&2
CRR_PROFILE="${CRR_PROFILE:-dev}" "$root/hack/install.sh" >&2
export KUBECONFIG="$KUBECONFIG_ADMIN"
pods=10

# The node daemons' CRI calls by method, their recreates, and whether they follow the events.
daemon_counts() {
  local pod
  for pod in $(kubectl -n crr-system get pods -l app.kubernetes.io/name=crr-node-daemon -o name | cut -d/ -f2); do
    kubectl get --raw "/api/v1/namespaces/crr-system/pods/$pod:10221/proxy/metrics"
  done | awk '
    /^crr_node_daemon_cri_request_duration_seconds_count/ { split($1, a, "\""); calls[a[2]] += $2 }
    /^crr_node_daemon_recreate_duration_seconds_count/ { recreates += $2 }
    /^crr_node_daemon_container_events_followed/ { followed += $2; daemons++ }
    END { printf "%d %d %d %d %d\n", calls["ListContainers"], calls["ContainerStatus"], recreates, followed, daemons }'
}

# run NAME MIN_STARTED: one request a pod; prints a table row.
run() {
  local name=$1 min_started=$2 ns="bench-looks-$1" pod before after start end done_count=0
  kubectl create namespace "$ns" >/dev/null
  kubectl -n "$ns" apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  replicas: $pods
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: app
        image: crr.local/busybox:1.35
        command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
YAML
  kubectl -n "$ns" rollout status deploy/app --timeout=180s >/dev/null
  read -r -a before <<<"$(daemon_counts)"
  start=$(date +%s.%N)
  for pod in $(kubectl -n "$ns" get pods -l app=app -o name | cut -d/ -f2); do
    kubectl -n "$ns" create -f - >/dev/null <<YAML
apiVersion: apps.kruise.io/v1beta1
kind: ContainerRecreateRequest
metadata: {name: $pod}
spec:
  podName: $pod
  containers: [{name: app}]
  strategy: {minStartedSeconds: $min_started}
YAML
  done
  for _ in $(seq 1 120); do
    done_count=$(kubectl -n "$ns" get crr -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c Completed || true)
    [ "$done_count" = "$pods" ] && break
    sleep 1
  done
  end=$(date +%s.%N)
  read -r -a after <<<"$(daemon_counts)"
  kubectl delete namespace "$ns" --wait=false >/dev/null
  local recreates=$((after[2] - before[2]))
  [ "$recreates" -gt 0 ] || { echo "runtime-looks: no recreate completed in $name" >&2; exit 1; }
  awk -v name="$name" -v lc=$((after[0] - before[0])) -v cs=$((after[1] - before[1])) \
    -v n="$recreates" -v done="$done_count" -v took="$(echo "$end - $start" | bc)" \
    -v followed="${after[3]}/${after[4]}" \
    'BEGIN { printf "| %s | %d of %d | %.1f | %.1f | %.1f | %s |\n", name, n, done, lc / n, cs / n, took, followed }'
}

echo "| requests | recreates (completed) | ListContainers a recreate | ContainerStatus a recreate | all completed in (s) | daemons following the runtime's events |"
echo "|---|---|---|---|---|---|"
run plain 0
run min-started-10s 10
