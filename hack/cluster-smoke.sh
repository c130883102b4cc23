#!/usr/bin/env bash
# Proves the test bed does what the project needs from it: a two-container pod
# runs, one container is stopped through the node's containerd, and the
# kubelet starts a new one in place: new container ID, restartCount 1, same
# pod UID and IP, the other container untouched. Needs `hack/cluster.sh up`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"
fail() { echo "cluster-smoke: FAIL: $*" >&2; kubectl -n "$ns" describe pod smoke >&2 || true; exit 1; }

ns="crr-smoke-$$"
trap 'kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true' EXIT
kubectl create namespace "$ns" >/dev/null
kubectl -n "$ns" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: smoke}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: crr.local/busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
  - name: side
    image: crr.local/busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
YAML
kubectl -n "$ns" wait --for=condition=Ready pod/smoke --timeout=90s >/dev/null || fail "pod not Ready"

field() { kubectl -n "$ns" get pod smoke -o "jsonpath=$1"; }
status_of() { field "{.status.containerStatuses[?(@.name==\"$1\")].$2}"; }
uid="$(field '{.metadata.uid}')" ip="$(field '{.status.podIP}')"
main_id="$(status_of main containerID)" side_id="$(status_of side containerID)"
echo "cluster-smoke: pod $uid at $ip, main=${main_id:0:25}… side=${side_id:0:25}…"

# Stop `main` the way the node daemon will: through the runtime, not the API.
ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks kill -s SIGTERM "${main_id#containerd://}"

deadline=$(( $(date +%s) + 60 ))
until [[ "$(status_of main restartCount)" == 1 && "$(status_of main ready)" == true ]]; do
  (( $(date +%s) < deadline )) || fail "kubelet did not restart main within 60s"
  sleep 1
done
new_id="$(status_of main containerID)"
[[ "$new_id" != "$main_id" ]] || fail "main kept its container ID"
[[ "$(field '{.metadata.uid}')" == "$uid" ]] || fail "pod UID changed"
[[ "$(field '{.status.podIP}')" == "$ip" ]] || fail "pod IP changed"
[[ "$(status_of side containerID)" == "$side_id" ]] || fail "side container was restarted"
[[ "$(status_of side restartCount)" == 0 ]] || fail "side restartCount changed"
echo "cluster-smoke: ok: main recreated in place (${new_id:0:25}…, restartCount 1); pod, IP and side unchanged"
