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

. "$root/bench/kwok.sh"
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

cleanup() {
  local rc=$?
  log "removing the kwok nodes and what ran on them"
  for ns in crr-scale crr-scale-churn crr-scale-real crr-scale-ttl; do
    kubectl delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  done
  for ns in crr-scale crr-scale-churn crr-scale-real crr-scale-ttl; do
    kubectl wait --for=delete "namespace/$ns" --timeout=600s >/dev/null 2>&1 || true
  done
  kwok_stop
  kubectl -n crr-system set env deployment/crr-operator CRR_OPERATOR_READINESS_GATE_SWEEP_SECONDS- >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT

kwok_start

KUBECONFIG="$KUBECONFIG_ADMIN" CRR_BENCH_OUT="${CRR_BENCH_OUT:-$root/bench/results}" CRR_CLUSTER_DIR="$CLUSTER_DIR" \
  "$root/target/release/crr-scale"
