#!/usr/bin/env bash
# crr at scale: thousands of pods on 100 simulated nodes beside the test bed's
# real ones. Brings the test bed up (CRR_NODES real nodes, default 1), installs a release build
# of crr, builds the pinned kwok from its Go module (hack/build-kwok.sh) and runs it against the
# test bed's API server (loopback; its nodes' addresses are never contacted), then runs
# `crr-scale` (tests/e2e/src/bin/crr-scale.rs; its header lists what is measured and the knobs:
# CRR_SCALE_STEPS, CRR_SCALE_KWOK_NODES, CRR_SCALE_WINDOW_SECONDS, CRR_SCALE_CHURN_RATE, ...).
# Results: bench/results/<date>-scale.{json,md} and bench/results/latest-scale.md.
# Removes the kwok nodes, their pods and kwok itself at the end, and gives the operator back its
# sweep interval; the test bed keeps running.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/hack/versions.sh"
. "$root/hack/cluster-env.sh"
log() { echo "scale: $*" >&2; }

"$root/hack/build-kwok.sh"
if [[ "${CRR_BENCH_SKIP_INSTALL:-}" != 1 ]]; then
  "$root/hack/cluster.sh" up
  CRR_PROFILE=release "$root/hack/install.sh"
fi
# The operator's leader-only work must not grow with the cluster's pods: its readiness-gate
# sweep (every 300 s by default) runs every 20 s here, so every step's window sees it list the
# step's pods.
if [[ "$(kubectl -n crr-system get deployment crr-operator \
      -o 'jsonpath={.spec.template.spec.containers[0].env[?(@.name=="CRR_OPERATOR_READINESS_GATE_SWEEP_SECONDS")].value}')" != 20 ]]; then
  kubectl -n crr-system set env deployment/crr-operator CRR_OPERATOR_READINESS_GATE_SWEEP_SECONDS=20 >/dev/null
  kubectl -n crr-system rollout status deployment/crr-operator --timeout=180s >/dev/null
fi
cd "$root"
cargo build -q --release -p crr-e2e --bin crr-scale --bin crr-bench --bin crr-api-costs

kwok_log="$CLUSTER_DIR/logs/kwok.log"
kwok_pid=""
cleanup() {
  local rc=$?
  log "removing the kwok nodes and what ran on them"
  for ns in crr-scale crr-scale-churn crr-scale-real crr-scale-ttl; do
    kubectl delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  done
  for ns in crr-scale crr-scale-churn crr-scale-real crr-scale-ttl; do
    kubectl wait --for=delete "namespace/$ns" --timeout=600s >/dev/null 2>&1 || true
  done
  kubectl delete nodes -l type=kwok --wait=false >/dev/null 2>&1 || true
  kubectl -n crr-system set env deployment/crr-operator CRR_OPERATOR_READINESS_GATE_SWEEP_SECONDS- >/dev/null 2>&1 || true
  if [[ -n "$kwok_pid" ]]; then kill "$kwok_pid" 2>/dev/null || true; wait "$kwok_pid" 2>/dev/null || true; fi
  exit "$rc"
}
trap cleanup EXIT

# kwok plays the kubelet of the nodes annotated kwok.x-k8s.io/node=fake (crr-scale creates
# them): leases, node status, pod phases. Its own server listens on loopback only; the nodes'
# address is a loopback one and their pods' addresses are never routed.
log "starting kwok $KWOK_VERSION (log: $kwok_log)"
"$KWOK_BIN/kwok" --kubeconfig "$KUBECONFIG_ADMIN" \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --cidr=10.250.0.1/16 --node-ip=127.0.0.2 --server-address=127.0.0.1:10247 \
  --node-lease-duration-seconds=40 -v=WARN -c "$root/bench/kwok-stages.yaml" >"$kwok_log" 2>&1 &
kwok_pid=$!
sleep 2
kill -0 "$kwok_pid" 2>/dev/null || { tail -20 "$kwok_log" >&2; log "kwok did not start"; exit 1; }

KUBECONFIG="$KUBECONFIG_ADMIN" CRR_BENCH_OUT="${CRR_BENCH_OUT:-$root/bench/results}" CRR_CLUSTER_DIR="$CLUSTER_DIR" \
  "$root/target/release/crr-scale"
